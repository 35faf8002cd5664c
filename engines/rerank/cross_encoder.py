"""BERT for sequence classification on MLX: the toolkit's encoder with transformers' head.

`BertForSequenceClassification` pools the [CLS] state through a dense layer and tanh (the
`pooler`), then a linear `classifier` gives one logit per label. A cross-encoder reads a
query and a document as one pair, `[CLS] query [SEP] document [SEP]` with token types 0
then 1, and scores the pair by its first logit; dropout is off (inference).
"""

from __future__ import annotations

from pathlib import Path

from engines.mlx.bert import BertArgs, build_encoder, read_weights

# Architectures in config.json that mean "this model reranks" (task inference, factory.py).
CROSS_ENCODER_ARCHITECTURES = frozenset({"BertForSequenceClassification"})


def labels_of(config: dict) -> int:
    """The classifier's outputs: `num_labels`, else the size of `id2label`, else 2 as
    transformers' default (cross-encoders trained for relevance have 1)."""
    if isinstance(config.get("num_labels"), int):
        return config["num_labels"]
    return len(config.get("id2label") or {}) or 2


def build_cross_encoder(args: BertArgs, labels: int):
    """The encoder with its pooler and classifier, as an `nn.Module` (MLX imported lazily:
    it runs on the runner's thread)."""
    import mlx.core as mx
    import mlx.nn as nn

    class CrossEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = build_encoder(args)
            self.pooler = nn.Linear(args.hidden_size, args.hidden_size)
            self.classifier = nn.Linear(args.hidden_size, labels)

        def __call__(self, ids: mx.array, real: mx.array, types: mx.array) -> mx.array:
            """Logits (batch, labels) of padded pairs: `real` 1 on tokens, `types` 0/1."""
            states = self.encoder(ids, real, types)
            return self.classifier(mx.tanh(self.pooler(states[:, 0])))

    return CrossEncoder()


def load_cross_encoder_weights(model, path: Path) -> None:
    """`model*.safetensors` into the cross-encoder: the encoder's under `encoder.`, the
    pooler's dense layer as `pooler`, the classifier as it is named."""
    renamed = []
    for name, value in read_weights(path):
        if name.startswith("pooler.dense."):
            name = "pooler." + name.removeprefix("pooler.dense.")
        elif not name.startswith("classifier."):
            name = "encoder." + name
        renamed.append((name, value))
    model.load_weights(renamed, strict=True)
