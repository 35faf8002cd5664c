"""Reranking on MLX: the engine that serves a BERT cross-encoder (engines/rerank/cross_encoder.py)
or an LLM-style reranker, a causal LM's yes/no (engines/rerank/causal.py), as config.json says.

Each document is read with the query as one pair, `[CLS] query [SEP] document [SEP]`
(token types 0 then 1), by the model's own tokenizer.json; its score is the sigmoid of the
pair's first logit, in (0, 1), as sentence-transformers' CrossEncoder and the other servers
score it. A pair longer than the window is cut as transformers' `truncation=True` cuts it
(longest first): one token at a time from whichever of query and document is longer then,
until the pair and its three special tokens fit. Pairs are sorted by length and scored in
padded batches of at most `DEFAULT_BATCH_TOKENS` tokens.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
from tokenizers import Tokenizer

from engines.base import Capabilities, LoadInfo
from engines.batch import Batch, text_refused
from engines.compat import refuse_off_task
from engines.errors import GatewayError, SourceError
from engines.mlx.bert import (
    DEFAULT_BATCH_TOKENS,
    BertArgs,
    check_activation,
    cut_text,
    padded_batches,
    read_json,
    stored_bytes,
)
from engines.mlx.memory import release_buffers
from engines.mlx.weights import weight_bytes
from engines.platform import PlatformPath
from engines.rerank.causal import CausalScorer, is_causal
from engines.rerank.cross_encoder import (
    MODEL_TYPES,
    build_cross_encoder,
    labels_of,
    load_cross_encoder_weights,
)
from engines.sources.resolve import check_source, resolve_source
from schemas.canonical import ChatRequest, Reranked, RerankRequest
from schemas.config import ModelConfig


class RerankEngine:
    """A reranker behind the Engine protocol: `rerank`, and `count_prompt` for usage."""

    capabilities = Capabilities(chat=False, embed=False, images=False, rerank=True)

    def __init__(
        self, model: ModelConfig, base_dir: Path | None, platform: PlatformPath | None = None
    ) -> None:
        self._config = model
        self._base_dir = base_dir
        self._platform = platform
        self._causal: CausalScorer | None = None  # an LLM-style reranker, else a BERT
        self._model = None
        self._tokenizer: Tokenizer | None = None  # pairs, cut to the window
        self._counter: Tokenizer | None = None  # never truncates: real lengths
        self._window = 0

    def estimate_memory(self) -> int:
        """The weights' size on disk: they load as stored, and there is no KV cache."""
        return stored_bytes(
            check_source(self._config.id, self._config.source, base_dir=self._base_dir)
        )

    def load(self, memory_left: int | None = None) -> LoadInfo:
        """Load the cross-encoder; `memory_left` is not needed: activations are bounded per
        batch."""
        import mlx.core as mx

        refuse_off_task(self._config, "rerank")
        model_id = self._config.id
        path = resolve_source(model_id, self._config.source, base_dir=self._base_dir)
        config = read_json(model_id, path / "config.json") or {}
        if is_causal(config):
            return self._load_causal(path)
        if config.get("model_type") not in MODEL_TYPES:
            found = config.get("architectures") or config.get("model_type")
            raise SourceError(
                model_id,
                str(path),
                f"architecture {found}: only BERT and XLM-RoBERTa cross-encoders and causal "
                "LMs rerank here",
            )
        try:
            args = msgspec.convert(config, BertArgs)
        except msgspec.ValidationError as e:
            raise SourceError(model_id, str(path / "config.json"), str(e)) from None
        check_activation(model_id, path / "config.json", args)
        window = self._window_of(path, args)
        file = path / "tokenizer.json"
        if not file.is_file():
            raise SourceError(model_id, str(file), "not found (a reranking model needs it)")
        tokenizer, counter = Tokenizer.from_file(str(file)), Tokenizer.from_file(str(file))
        for t in tokenizer, counter:  # tokenizer.json may carry its own; ours wins
            t.no_padding()
            t.no_truncation()
        tokenizer.enable_truncation(window, strategy="longest_first")
        model = build_cross_encoder(args, labels_of(config))
        load_cross_encoder_weights(model, path)
        mx.eval(model.parameters())
        self._model, self._tokenizer, self._counter = model, tokenizer, counter
        self._window = window
        self._typed = args.type_vocab_size > 1  # XLM-RoBERTa has one token type
        detail = {"path": str(path), "task": "rerank"}
        return LoadInfo(memory_bytes=weight_bytes(model), context=window, detail=detail)

    def _load_causal(self, path: Path) -> LoadInfo:
        wanted = self._config.context.max
        scorer = CausalScorer(
            self._config.id, path, self._platform, None if wanted == "auto" else wanted
        )
        self._causal, self._window = scorer, scorer.window
        detail = {"path": str(path), "task": "rerank", "scorer": "yes/no of a causal LM"}
        return LoadInfo(
            memory_bytes=weight_bytes(scorer.model), context=scorer.window, detail=detail
        )

    def open_batch(self) -> Batch:
        """The empty batch a runner's thread opens; reranks are answered by `rerank` and
        never join it."""
        return text_refused(
            f"model {self._config.id!r} is a reranking model; it does not generate text: "
            "send it rerank requests"
        )

    def rerank(self, request: RerankRequest) -> Reranked:
        """One score per document, in order: sigmoid of the first logit of (query, document)."""
        import mlx.core as mx

        started = time.perf_counter()
        documents = request.documents
        counter = self._causal.tokenizer if self._causal else self._counter
        if request.max_tokens_per_doc is not None:
            documents = [cut_text(counter, d, request.max_tokens_per_doc) for d in documents]
        if self._causal is not None:
            scores, tokens = self._causal.score(request.query, documents)
            return Reranked(
                scores=scores, prompt_tokens=tokens, seconds=time.perf_counter() - started
            )
        pairs = self._tokenizer.encode_batch([(request.query, d) for d in documents])
        ids = [p.ids for p in pairs]
        scores: list[float] = [0.0] * len(ids)
        for batch in padded_batches(ids, DEFAULT_BATCH_TOKENS):
            length = max(len(ids[i]) for i in batch)

            def padded(rows: list[list[int]], length: int = length) -> mx.array:
                # Padding (0) is never seen: the mask hides it from attention.
                return mx.array([row + [0] * (length - len(row)) for row in rows])

            logits = self._model(
                padded([ids[i] for i in batch]),
                padded([[1] * len(ids[i]) for i in batch]),
                padded([pairs[i].type_ids if self._typed else [0] * len(ids[i]) for i in batch]),
            )
            for i, score in zip(batch, mx.sigmoid(logits[:, 0]).tolist(), strict=True):
                scores[i] = score
        return Reranked(
            scores=scores,
            prompt_tokens=sum(len(x) for x in ids),
            seconds=time.perf_counter() - started,
        )

    def count_prompt(self, request: ChatRequest) -> int:
        """Tokens of the messages' text as this model reads it, special tokens included."""
        text = request.raw_prompt
        if text is None:
            text = "\n".join(m.content for m in request.messages)
        if self._causal is not None:
            return self._causal.count(text)
        return len(self._counter.encode(text).ids)

    def trim(self) -> None:
        """Free MLX's cache of buffers (batches of every shape fill it) when idle."""
        release_buffers()

    def reasons(self) -> bool:
        """A reranker does not generate, so it never thinks."""
        return False

    def unload(self) -> None:
        self._model = self._tokenizer = self._counter = self._causal = None
        release_buffers()

    def _window_of(self, path: Path, args: BertArgs) -> int:
        """`context.max`, or the tokenizer's `model_max_length` (the positions the weights
        have when it says none or more)."""
        wanted = self._config.context.max
        # XLM-RoBERTa's first positions stand for padding: its window is that much smaller.
        positions = args.max_position_embeddings - args.position_offset
        if wanted == "auto":
            config = read_json(self._config.id, path / "tokenizer_config.json") or {}
            told = config.get("model_max_length")
            fits = isinstance(told, int) and 0 < told <= positions
            return told if fits else positions
        if wanted > positions:
            raise GatewayError(
                f"model {self._config.id!r}: context.max {wanted} exceeds the "
                f"{positions} positions the model was trained with"
            )
        return wanted
