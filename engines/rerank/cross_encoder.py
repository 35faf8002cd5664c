"""BERT and XLM-RoBERTa for sequence classification on MLX: the toolkit's encoder with
transformers' heads.

`BertForSequenceClassification` pools the [CLS] state through a dense layer and tanh (the
`pooler`), then a linear `classifier` gives one logit per label.
`XLMRobertaForSequenceClassification` (bge-reranker-v2-m3) has no pooler: its `classifier`
is a dense layer and tanh on the <s> state, then `out_proj`. A cross-encoder reads a query
and a document as one pair (`[CLS] query [SEP] document [SEP]`, token types 0 then 1;
XLM-RoBERTa's `<s> query </s></s> document </s>`, one token type) and scores the pair by its
first logit; dropout is off (inference).
"""

from __future__ import annotations

from pathlib import Path

from engines.mlx.bert import BertArgs, build_encoder, read_weights

# Architectures in config.json that mean "this model reranks" (task inference, factory.py).
CROSS_ENCODER_ARCHITECTURES = frozenset(
    {"BertForSequenceClassification", "XLMRobertaForSequenceClassification"}
)
# config.json's `model_type`s the cross-encoder runs.
MODEL_TYPES = frozenset({"bert", "xlm-roberta"})


def labels_of(config: dict) -> int:
    """The classifier's outputs: `num_labels`, else the size of `id2label`, else 2 as
    transformers' default (cross-encoders trained for relevance have 1)."""
    if isinstance(config.get("num_labels"), int):
        return config["num_labels"]
    return len(config.get("id2label") or {}) or 2


def build_cross_encoder(args: BertArgs, labels: int):
    """The encoder with its head, as an `nn.Module` (MLX imported lazily: it runs on the
    runner's thread)."""
    import mlx.core as mx
    import mlx.nn as nn

    size = args.hidden_size

    class RobertaHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dense = nn.Linear(size, size)
            self.out_proj = nn.Linear(size, labels)

        def __call__(self, first: mx.array) -> mx.array:
            return self.out_proj(mx.tanh(self.dense(first)))

    class CrossEncoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = build_encoder(args)
            if args.model_type == "xlm-roberta":
                self.classifier = RobertaHead()
            else:
                self.pooler = nn.Linear(size, size)
                self.classifier = nn.Linear(size, labels)

        def __call__(self, ids: mx.array, real: mx.array, types: mx.array) -> mx.array:
            """Logits (batch, labels) of padded pairs: `real` 1 on tokens, `types` 0/1."""
            first = self.encoder(ids, real, types)[:, 0]
            if isinstance(self.classifier, RobertaHead):
                return self.classifier(first)
            return self.classifier(mx.tanh(self.pooler(first)))

    return CrossEncoder()


def load_cross_encoder_weights(model, path: Path) -> None:
    """`model*.safetensors` into the cross-encoder: the encoder's under `encoder.`, BERT's
    pooler's dense layer as `pooler`, the classifier as it is named."""
    renamed = []
    for name, value in read_weights(path):
        if name.startswith("pooler.") and not hasattr(model, "pooler"):
            continue  # an XLM-RoBERTa checkpoint saved with the pooler it does not use
        if name.startswith("pooler.dense."):
            name = "pooler." + name.removeprefix("pooler.dense.")
        elif not name.startswith("classifier."):
            name = "encoder." + name
        renamed.append((name, value))
    model.load_weights(renamed, strict=True)
