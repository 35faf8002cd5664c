"""BERT as sentence-transformers runs it, on MLX: the encoder, its weights, its pooling.

One architecture in one flat file, mlx-lm style: `BertArgs` from config.json, the layers,
then the loaders. The pooling (mean over real tokens, or the CLS token), the L2
normalization and the window come from sentence-transformers' own files beside the weights
(`modules.json`, `1_Pooling/config.json`, `sentence_bert_config.json`). In the toolkit, not
in an engine: the embedding engine (`engines/embed`) pools it, the reranker
(`engines/rerank`) puts a classification head on it and reads token types (sentence pairs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import msgspec

from engines.errors import SourceError

# Padded tokens per forward pass: bounds one pass's activations (~50 MB of attention scores
# at a 256-token window), so 2048 inputs need no more memory than 16.
DEFAULT_BATCH_TOKENS = 4096

# Hugging Face names -> ours, applied in order (attention.output.* before output.*).
RENAMES = (
    ("encoder.layer.", "layers."),
    (".attention.self.", ".attention."),
    (".attention.output.dense.", ".attention.out."),
    (".attention.output.LayerNorm.", ".attention_norm."),
    (".intermediate.dense.", ".mlp_in."),
    (".output.dense.", ".mlp_out."),
    (".output.LayerNorm.", ".mlp_norm."),
    ("embeddings.LayerNorm.", "embeddings.norm."),
)


class BertArgs(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a BERT config.json the encoder needs (the rest are ignored)."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    model_type: str = "bert"
    pad_token_id: int | None = None

    @property
    def position_offset(self) -> int:
        """Where the positions of real tokens start: 0 for BERT; XLM-RoBERTa's start after
        its padding id (transformers' `create_position_ids_from_input_ids`)."""
        if self.model_type != "xlm-roberta":
            return 0
        return (1 if self.pad_token_id is None else self.pad_token_id) + 1


# config.json's `hidden_act` -> the `mlx.nn` function that computes it, as transformers does.
# Any other name is refused at load: a different function would give wrong vectors silently.
ACTIVATIONS = {
    "gelu": "gelu",  # exact, with erf
    "gelu_new": "gelu_approx",  # the tanh approximation
    "gelu_pytorch_tanh": "gelu_approx",
    "gelu_fast": "gelu_approx",  # the same tanh formula, factored differently
    "quick_gelu": "gelu_fast_approx",  # x * sigmoid(1.702 x)
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}


def check_activation(model_id: str, config_file: Path, args: BertArgs) -> None:
    """Refuse a `hidden_act` this encoder does not compute (SourceError naming it)."""
    if args.hidden_act not in ACTIVATIONS:
        known = ", ".join(sorted(ACTIVATIONS))
        raise SourceError(
            model_id,
            str(config_file),
            f"hidden_act {args.hidden_act!r} is not supported (supported: {known})",
        )


class Pooling(msgspec.Struct, frozen=True, kw_only=True):
    """How token states become one vector, per sentence-transformers' files."""

    mode: str = "mean"  # "mean" | "cls"
    normalize: bool = True
    max_length: int = 512


def build_encoder(args: BertArgs):
    """The BERT encoder as an `nn.Module` (imported lazily: MLX runs on the runner's thread)."""
    import mlx.core as mx
    import mlx.nn as nn

    activation = getattr(nn, ACTIVATIONS[args.hidden_act])

    class Embeddings(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word_embeddings = nn.Embedding(args.vocab_size, args.hidden_size)
            self.position_embeddings = nn.Embedding(args.max_position_embeddings, args.hidden_size)
            self.token_type_embeddings = nn.Embedding(args.type_vocab_size, args.hidden_size)
            self.norm = nn.LayerNorm(args.hidden_size, eps=args.layer_norm_eps)

        def __call__(self, ids: mx.array, types: mx.array | None = None) -> mx.array:
            positions = mx.arange(ids.shape[1])[None] + args.position_offset
            # One sentence: token type 0 everywhere; a pair (a reranker's) gives its own.
            types = mx.zeros_like(ids) if types is None else types
            x = self.word_embeddings(ids) + self.position_embeddings(positions)
            return self.norm(x + self.token_type_embeddings(types))

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            size = args.hidden_size
            self.heads = args.num_attention_heads
            self.query, self.key, self.value = (nn.Linear(size, size) for _ in range(3))
            self.out = nn.Linear(size, size)

        def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
            batch, length, size = x.shape

            def split(t: mx.array) -> mx.array:
                return t.reshape(batch, length, self.heads, -1).transpose(0, 2, 1, 3)

            q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
            scale = (size // self.heads) ** -0.5
            o = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
            return self.out(o.transpose(0, 2, 1, 3).reshape(batch, length, size))

    class Layer(nn.Module):
        """Post-norm BERT layer: attention, add & norm, MLP (`hidden_act`), add & norm."""

        def __init__(self) -> None:
            super().__init__()
            size, eps = args.hidden_size, args.layer_norm_eps
            self.attention = Attention()
            self.attention_norm = nn.LayerNorm(size, eps=eps)
            self.mlp_in = nn.Linear(size, args.intermediate_size)
            self.mlp_out = nn.Linear(args.intermediate_size, size)
            self.mlp_norm = nn.LayerNorm(size, eps=eps)

        def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
            x = self.attention_norm(x + self.attention(x, mask))
            return self.mlp_norm(x + self.mlp_out(activation(self.mlp_in(x))))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embeddings = Embeddings()
            self.layers = [Layer() for _ in range(args.num_hidden_layers)]

        def __call__(
            self, ids: mx.array, real: mx.array, types: mx.array | None = None
        ) -> mx.array:
            """Hidden states (batch, length, hidden); `real` is 1 on tokens, 0 on padding;
            `types` the token types (segment ids), 0 everywhere when None."""
            mask = real.astype(mx.bool_)[:, None, None, :]  # no query attends to padding
            x = self.embeddings(ids, types)
            for layer in self.layers:
                x = layer(x, mask)
            return x

    return Encoder()


def load_weights(encoder, path: Path) -> None:
    """Load `model*.safetensors` into the encoder, renamed; the unused pooler is dropped."""
    encoder.load_weights(
        [(n, v) for n, v in read_weights(path) if not n.startswith("pooler.")], strict=True
    )


WEIGHT_FILES = "model*.safetensors"


def stored_bytes(path: Path) -> int:
    """The weights' size on disk (an encoder loads them as stored): 0 for a file source."""
    return sum(f.stat().st_size for f in path.glob(WEIGHT_FILES)) if path.is_dir() else 0


def read_weights(path: Path) -> list[tuple[str, object]]:
    """`model*.safetensors`' tensors under our names (`bert.` or XLM-RoBERTa's `roberta.`
    dropped, `RENAMES` applied);
    the pooler and a classification head (`pooler.`, `classifier.`) keep theirs."""
    import mlx.core as mx

    weights = {}
    for file in sorted(path.glob(WEIGHT_FILES)):
        weights.update(mx.load(str(file)))
    renamed = []
    for name, value in weights.items():
        name = name.removeprefix("bert.").removeprefix("roberta.")
        if name.endswith("position_ids"):
            continue
        for old, new in RENAMES:
            name = name.replace(old, new)
        renamed.append((name, value))
    return renamed


def cut_text(tokenizer, text: str, tokens: int) -> str:
    """`text` cut after its first `tokens` tokens (as `tokenizer` splits it, special tokens
    not counted): the cut falls where a token ends, so the text re-encodes to those tokens."""
    encoding = tokenizer.encode(text, add_special_tokens=False)
    if len(encoding.ids) <= tokens:
        return text
    return text[: encoding.offsets[tokens - 1][1]] if tokens > 0 else ""


def read_pooling(model_id: str, path: Path, args: BertArgs) -> Pooling:
    """Pooling, normalization and window from sentence-transformers' files, if present.

    A bare `BertModel` directory gets mean pooling and normalization: what all-MiniLM and
    most sentence embedders use, and what clients of an embeddings API expect.
    """
    modules = read_json(model_id, path / "modules.json") or []
    types = {m.get("type", ""): m.get("path", "") for m in modules if isinstance(m, dict)}
    normalize = any(t.endswith(".Normalize") for t in types) if types else True
    folder = next((p for t, p in types.items() if t.endswith(".Pooling")), "1_Pooling")
    pooling = read_json(model_id, path / folder / "config.json") or {}
    if pooling.get("pooling_mode_cls_token"):
        mode = "cls"
    elif pooling.get("pooling_mode_mean_tokens", True):
        mode = "mean"
    else:
        modes = sorted(k for k, v in pooling.items() if k.startswith("pooling_mode") and v)
        raise SourceError(model_id, str(path / folder), f"pooling {modes}: only mean or CLS")
    st = read_json(model_id, path / "sentence_bert_config.json") or {}
    window = int(st.get("max_seq_length") or args.max_position_embeddings)
    return Pooling(
        mode=mode, normalize=normalize, max_length=min(window, args.max_position_embeddings)
    )


def read_json(model_id: str, file: Path):
    """The file's JSON, or None when it is absent; a SourceError when it is unreadable."""
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise SourceError(model_id, str(file), f"unreadable: {e}") from None


def padded_batches(ids: list[list[int]], budget: int) -> Iterator[list[int]]:
    """The inputs' indices in ascending length, grouped so each padded batch stays within
    `budget` tokens (padding stays small: neighbours are of like length)."""
    batch: list[int] = []
    for i in sorted(range(len(ids)), key=lambda i: len(ids[i])):
        # Ascending order: the newest input is the longest, so it sets the padded length.
        if batch and (len(batch) + 1) * len(ids[i]) > budget:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch
