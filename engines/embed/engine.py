"""Sentence embeddings on MLX: the engine that serves a BERT encoder (engines/mlx/bert.py).

Inputs are tokenized with the model's own tokenizer.json, cut to the window (for
all-MiniLM-L6-v2 256 word pieces, [CLS] and [SEP] included, per sentence_bert_config.json,
not the 512 positions the weights have), sorted by length and run in padded batches.

It answers rerank requests too: each document's score is the cosine similarity of its
vector and the query's (in [-1, 1]), each text cut to the window as an embedding is.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
from tokenizers import Tokenizer

from engines.base import Capabilities, LoadInfo
from engines.batch import Batch, text_refused
from engines.compat import refuse_off_task
from engines.errors import BadRequest, DimensionsUnavailable, GatewayError, SourceError
from engines.mlx.bert import (
    DEFAULT_BATCH_TOKENS,
    BertArgs,
    Pooling,
    build_encoder,
    check_activation,
    cut_text,
    load_weights,
    padded_batches,
    read_json,
    read_pooling,
    stored_bytes,
)
from engines.mlx.memory import release_buffers
from engines.mlx.weights import weight_bytes
from engines.sources.resolve import check_source, resolve_source
from schemas.canonical import ChatRequest, Embedded, EmbedRequest, Reranked, RerankRequest
from schemas.config import ModelConfig

# Architectures in config.json that mean "this model embeds" (task inference, factory.py).
EMBEDDING_ARCHITECTURES = frozenset({"BertModel"})


class EmbeddingEngine:
    """An embedding model behind the Engine protocol: `embed`, `rerank` (by cosine), and
    `count_prompt` for usage."""

    capabilities = Capabilities(chat=False, embed=True, images=False, rerank=True)

    def __init__(self, model: ModelConfig, base_dir: Path | None) -> None:
        self._config = model
        self._base_dir = base_dir
        self._encoder = None
        self._tokenizer: Tokenizer | None = None  # truncates to the window
        self._counter: Tokenizer | None = None  # never truncates: real lengths
        self._pooling = Pooling()
        self._window = 0
        self._dimensions = 0

    def estimate_memory(self) -> int:
        """The weights' size on disk: they load as stored (float32), and there is no KV cache."""
        return stored_bytes(
            check_source(self._config.id, self._config.source, base_dir=self._base_dir)
        )

    def load(self, memory_left: int | None = None) -> LoadInfo:
        """Load the encoder; `memory_left` is not needed: activations are bounded per batch."""
        import mlx.core as mx

        refuse_off_task(self._config, "embed")
        model_id = self._config.id
        path = resolve_source(model_id, self._config.source, base_dir=self._base_dir)
        config = read_json(model_id, path / "config.json") or {}
        if config.get("model_type") != "bert":
            found = config.get("architectures") or config.get("model_type")
            raise SourceError(model_id, str(path), f"architecture {found}: only BERT embeds here")
        try:
            args = msgspec.convert(config, BertArgs)
        except msgspec.ValidationError as e:
            raise SourceError(model_id, str(path / "config.json"), str(e)) from None
        check_activation(model_id, path / "config.json", args)
        pooling = read_pooling(model_id, path, args)
        wanted = self._config.context.max
        window = pooling.max_length if wanted == "auto" else wanted
        if window > args.max_position_embeddings:
            raise GatewayError(
                f"model {model_id!r}: context.max {window} exceeds the "
                f"{args.max_position_embeddings} positions the model was trained with"
            )
        file = path / "tokenizer.json"
        if not file.is_file():
            raise SourceError(model_id, str(file), "not found (an embedding model needs it)")
        tokenizer, counter = Tokenizer.from_file(str(file)), Tokenizer.from_file(str(file))
        # tokenizer.json may carry its own padding/truncation (this one: fixed 128); ours wins.
        for t in tokenizer, counter:
            t.no_padding()
            t.no_truncation()
        tokenizer.enable_truncation(window)  # counts [CLS] and [SEP], as sentence-transformers
        encoder = build_encoder(args)
        load_weights(encoder, path)
        mx.eval(encoder.parameters())
        self._encoder, self._tokenizer, self._counter = encoder, tokenizer, counter
        self._pooling, self._window, self._dimensions = pooling, window, args.hidden_size
        memory = weight_bytes(encoder)
        detail = {"path": str(path), "task": "embed", "dimensions": str(args.hidden_size)}
        # OpenAI's token-id inputs are cl100k_base ids, decoded to text before this model's
        # tokenizer reads them (gateway/openai/token_ids.py): said here, where users look.
        detail["openai_token_ids"] = "cl100k_base"
        return LoadInfo(
            memory_bytes=memory, context=window, dimensions=args.hidden_size, detail=detail
        )

    def open_batch(self) -> Batch:
        """The empty batch a runner's thread opens before it takes any job, embeddings too
        (they are answered by `embed` and never join it)."""
        return text_refused(
            f"model {self._config.id!r} is an embedding model; it does not generate text: "
            "send it embedding requests"
        )

    def embed(self, request: EmbedRequest) -> Embedded:
        """One vector per input, in order; batched by length so padding stays small."""
        import mlx.core as mx

        started = time.perf_counter()
        # Before any input is read: a model loaded after the job queued refuses it here.
        if request.dimensions is not None and request.dimensions != self._dimensions:
            raise DimensionsUnavailable(self._config.id, self._dimensions)
        if not request.truncate:
            self._refuse_overlong(request.inputs)
        ids = [e.ids for e in self._tokenizer.encode_batch(request.inputs)]
        vectors: list[list[float]] = [[] for _ in ids]
        for batch in padded_batches(ids, DEFAULT_BATCH_TOKENS):
            length = max(len(ids[i]) for i in batch)
            # Padding id 0 is never seen: the mask hides it from attention and pooling.
            tokens = mx.array([ids[i] + [0] * (length - len(ids[i])) for i in batch])
            real = mx.array([[1] * len(ids[i]) + [0] * (length - len(ids[i])) for i in batch])
            pooled = self._pool(self._encoder(tokens, real), real)
            for i, vector in zip(batch, pooled.tolist(), strict=True):
                vectors[i] = vector
        return Embedded(
            vectors=vectors,
            prompt_tokens=sum(len(x) for x in ids),
            seconds=time.perf_counter() - started,
        )

    def rerank(self, request: RerankRequest) -> Reranked:
        """Each document's cosine similarity to the query, in order: query and documents
        embedded in one call (batched by length), each cut to the window."""
        import mlx.core as mx

        started = time.perf_counter()
        documents = request.documents
        if request.max_tokens_per_doc is not None:
            documents = [cut_text(self._counter, d, request.max_tokens_per_doc) for d in documents]
        embedded = self.embed(EmbedRequest(inputs=[request.query, *documents]))
        vectors = mx.array(embedded.vectors)
        # Normalized here too: a model without the Normalize module pools raw vectors.
        unit = vectors / mx.maximum(mx.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
        return Reranked(
            scores=(unit[1:] @ unit[0]).tolist(),
            prompt_tokens=embedded.prompt_tokens,
            seconds=time.perf_counter() - started,
        )

    def count_prompt(self, request: ChatRequest) -> int:
        """Tokens of the messages' text as this model reads it, special tokens included."""
        text = request.raw_prompt
        if text is None:
            text = "\n".join(m.content for m in request.messages)
        return len(self._counter.encode(text).ids)

    def trim(self) -> None:
        """Free MLX's cache of buffers (batches of every shape fill it); the runner calls
        this when it goes idle, so memory after a burst returns to what the model holds."""
        release_buffers()

    def reasons(self) -> bool:
        """An embedding model does not generate, so it never thinks."""
        return False

    def unload(self) -> None:
        self._encoder = self._tokenizer = self._counter = None
        release_buffers()

    def _pool(self, states, real):
        import mlx.core as mx

        if self._pooling.mode == "cls":
            pooled = states[:, 0]
        else:
            weights = real[..., None].astype(states.dtype)
            pooled = (states * weights).sum(axis=1) / weights.sum(axis=1)
        if self._pooling.normalize:
            norm = mx.linalg.norm(pooled, axis=-1, keepdims=True)
            pooled = pooled / mx.maximum(norm, 1e-12)  # torch's F.normalize eps
        return pooled

    def _refuse_overlong(self, inputs: list[str]) -> None:
        for index, encoding in enumerate(self._counter.encode_batch(inputs)):
            if len(encoding.ids) > self._window:
                raise BadRequest(
                    f"input {index} has {len(encoding.ids)} tokens and model "
                    f"{self._config.id!r} reads at most {self._window} (context.max); "
                    "shorten it or allow truncation"
                )
