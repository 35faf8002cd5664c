"""The MLX engine on mlx-lm: load, chat template, sampling, stop strings, engine-side counts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from engines import timeline
from engines.base import Capabilities, LoadInfo
from engines.batch import Batch, SerialBatch
from engines.cache import CacheDir
from engines.errors import BadRequest, ContextTooLarge, ModelUnavailable, SourceError
from engines.mlx.grammar import Grammar
from engines.mlx.facts import source_chat_template
from engines.mlx.detokenize import byte_detokenizer
from engines.mlx.cache.disk import BLOCK_TOKENS, DiskKV, cacheable, min_tokens, why_off
from engines.mlx.encode import TextEncoder
from engines.mlx.memory import release_buffers
from engines.mlx.penalties import make_penalties
from engines.mlx.prepare import start
from engines.mlx.sizing import kv_bytes_per_token, size_context, trained_context
from engines.mlx.stream import StreamRun
from engines.mlx.template import render_chat
from engines.mlx.weights import (
    EXPANDED,
    FLOAT32_EXPANSION,
    expand_quantized,
    expansion_bytes,
    held_element,
    quantized_layers,
    weight_bytes,
)
from engines.mlx.logprobs import logprobs_of
from engines.platform import PlatformPath
from engines.residency import describe
from engines.sources.resolve import check_source, resolve_source
from engines.text.output import DEFAULT_TOOL_PARSER, OutputParser, ToolFormat, load_tool_format
from engines.text.reasoning import template_reasons, thinking_markers
from engines.text.tools import (
    fold_system_turns,
    template_messages,
)
from schemas.canonical import (
    ChatRequest,
    Logprobs,
    Output,
)
from schemas.config import ModelConfig

# The group size of a quantized KV cache (`kv_bits`): mlx-lm's default, named because the
# disk tier's blocks are rebuilt as `QuantizedKVCache`s of it.
KV_GROUP_SIZE = 64


class Prepared(NamedTuple):
    prompt: list[int]
    max_tokens: int
    sampler: Callable
    parser: OutputParser
    seed: int | None
    # Applied to each step's logits before sampling, on every decoding path.
    logits_processors: tuple[Callable, ...] = ()
    # The request's logprobs: top alternatives per token (None: none asked), a token's bytes.
    logprobs: int | None = None
    piece: Callable[[int], bytes] | None = None


class MLXEngine:
    capabilities = Capabilities(chat=True)

    def __init__(
        self,
        model: ModelConfig,
        platform: PlatformPath,
        base_dir: Path | None,
        draft: ModelConfig | None = None,
        disk: CacheDir | None = None,
        *,
        loader: Callable[[Path], tuple] | None = None,
    ) -> None:
        self._config = model
        self._disk_dir = disk
        self.disk: DiskKV | None = None  # the KV cache's disk tier, while loaded
        # How the weights load from the resolved path (a rank's shard: engines/llm/distributed).
        self._loader = loader
        self._draft_config = draft
        self._draft = None
        self._platform = platform
        self._base_dir = base_dir
        self._model = None
        self._tokenizer = None
        self._text_encoder: TextEncoder | None = None
        self._detokenizer = None  # a ByteDetokenizer to copy for each sequence, or None
        self._context = 0
        self.parked_bytes = 0  # the byte limit of the parked sessions' KV caches
        self.parked_draft_bytes = 0  # and of their draft model's caches (`draft:`)
        self._tool_format: ToolFormat | None = None
        self._grammar = None  # the model's grammar tools (engines/mlx/grammar.py)

    @property
    def platform(self) -> PlatformPath:
        return self._platform

    @property
    def draft_model(self):
        """The loaded draft model (`draft:`), or None."""
        return self._draft

    def reasons(self) -> bool:
        """Whether the model thinks before it answers: its chat template says so (read from
        the loaded tokenizer, or a model directory's tokenizer files without loading)."""
        if self._tokenizer is not None:
            return bool(getattr(self._tokenizer, "has_thinking", False)) or template_reasons(
                self._tokenizer.chat_template
            )
        return template_reasons(source_chat_template(self._config, self._base_dir))

    def estimate_memory(self) -> int:
        """The sources' size on disk (the draft model's too), times the float32 expansion
        where the CPU path does it."""
        float32 = self._platform.weights == "float32"
        # The bfloat16 copy (CUDA) is taken only where the memory left affords it (`load`).
        total = self._on_disk(self._config) * (
            FLOAT32_EXPANSION if float32 and self._config.weights == "auto" else 1
        )
        if self._draft_config is not None:  # a draft is expanded on the CPU whatever its keys
            total += self._on_disk(self._draft_config) * (FLOAT32_EXPANSION if float32 else 1)
        return total

    def _on_disk(self, config: ModelConfig) -> int:
        path = check_source(config.id, config.source, base_dir=self._base_dir)
        files = [path] if path.is_file() else list(path.glob("*.safetensors"))
        return sum(f.stat().st_size for f in files)

    def load(self, memory_left: int | None = None) -> LoadInfo:
        import mlx.core as mx

        path = resolve_source(self._config.id, self._config.source, base_dir=self._base_dir)
        if self._loader is not None:
            model, tokenizer = self._loader(path)
        else:
            model, tokenizer = load_model_dir(self._config.id, self._config.source, path)
        trained = trained_context(getattr(model, "args", None))
        # The draft model first: its weights, and a draft cache beside each window (a request
        # decoded together or a parked session) come out of the memory the window is sized in.
        draft, draft_weights, draft_per_token = None, 0, 0
        if self._draft_config is not None:
            draft = self._load_draft(tokenizer)
            draft_weights = weight_bytes(draft)
            draft_held = "float32" if self._platform.weights == "float32" else "as stored"
            draft_per_token = kv_per_token(draft, draft_held, self._config.kv_bits)
        # The KV caches counted against the budget: one window per request decoded
        # together, and the parked sessions' caches, bounded to `parked` windows in all.
        parked = self._parked_windows()
        windows = self._config.concurrency + parked
        left = None if memory_left is None else memory_left - draft_weights
        held = self._weights_held(model, left, trained, windows, draft_per_token)
        if held in EXPANDED:
            expand_quantized(model, held)
        mx.eval(model.parameters())
        weights = weight_bytes(model)
        per_token = kv_per_token(model, held, self._config.kv_bits)
        self._context = self._window(trained, weights, per_token + draft_per_token, left, windows)
        self.parked_bytes = per_token * self._context * parked
        self.parked_draft_bytes = draft_per_token * self._context * parked
        if self._config.speculation is not None:
            refuse_speculation_on_cuda(self._config.id, self._platform)
            refuse_untrimmable(self._config.id, model)
        self._model, self._tokenizer = model, tokenizer
        self._text_encoder = TextEncoder(tokenizer)
        self._detokenizer = byte_detokenizer(tokenizer.detokenizer)
        self.disk, disk_detail = self._open_disk(model, path, held)
        self._eos_ids = set(tokenizer.eos_token_ids)
        self._tool_format = self._pick_tool_format(tokenizer)
        self._think = thinking_markers(tokenizer)
        self._grammar = Grammar(
            model, tokenizer, self._text_encoder, self._think, self._tool_format
        )
        # Drafts are verified on the batch path (speculate.py), which trims refused tokens.
        if draft is not None and not self._config.kv_bits:
            refuse_untrimmable(self._config.id, model, "draft")
            refuse_untrimmable(self._config.id, draft, "draft")
        self._draft = draft
        return LoadInfo(
            memory_bytes=weights
            + draft_weights
            + (per_token + draft_per_token) * self._context * windows,
            context=self._context,
            trained_context=trained,
            detail={
                "path": str(path),
                "weights": held,
                "kv_bytes_per_token": str(per_token),
                **self._decoding_detail(draft_weights),
                "disk_cache": disk_detail,
            },
        )

    def narrow_window(self, context: int) -> None:
        """Hold the window to `context` tokens: the ranks of a sharded model decode with the
        smallest any of them can hold, so each refuses, truncates and parks as the others."""
        self.parked_bytes = self.parked_bytes * context // max(self._context, 1)
        self.parked_draft_bytes = self.parked_draft_bytes * context // max(self._context, 1)
        self._context = context

    def count_prompt(self, request: ChatRequest) -> int:
        return len(self._encode(request))

    def prepare(self, request: ChatRequest, *, aside: bool = False) -> Prepared:
        """Everything one generation needs: prompt tokens, budget, sampler, output parser.

        `aside`: the prompt is tokenized on the encoder's own thread (`TextEncoder`): for
        the first request of an idle batch, which the model thread's state after a burst
        slows down."""
        prompt = self._encode(request, aside)
        if timeline.ON:
            timeline.mark("encoded")
        window = request.window_of(self._context)
        begun = start(
            self._config.id,
            prompt,
            window,
            request,
            self._tokenizer,
            self._tool_format,
            self._think,
        )
        # Penalties and bias first; the grammar's mask (engines/mlx/grammar.py) last, so
        # nothing lifts a token it refuses back from -inf.
        vocab = self._model.args.vocab_size
        processors = make_penalties(request.sampling, len(prompt), window, vocab)
        processors += self._grammar.processors(request, begun.tail)
        top = request.controls.logprobs.top if request.controls.logprobs else None
        piece = self._grammar.piece if request.controls.logprobs else None
        seed = request.sampling.seed
        return Prepared(
            prompt,
            begun.max_tokens,
            begun.sampler,
            begun.parser,
            seed,
            tuple(processors),
            top,
            piece,
        )

    def prompt_logprobs(self, request: ChatRequest, prompt: list[int]) -> Logprobs | None:
        """The prompt's own token logprobs, when the request asked for them (echo)."""
        if not (request.controls.logprobs and request.controls.logprobs.prompt):
            return None
        from engines.mlx.logprobs import prompt_logprobs

        tokens = prompt_logprobs(
            self._model, prompt, request.controls.logprobs.top, self._grammar.piece
        )
        return Logprobs(tokens=tokens, prompt=True)

    def detokenizer(self):
        """A streaming detokenizer for one sequence: the table-driven one where the model's
        vocabulary is byte-level BPE (engines/mlx/detokenize.py), else mlx-lm's own."""
        if self._detokenizer is not None:
            return self._detokenizer.fresh()
        return self._tokenizer.detokenizer

    def open_batch(self) -> Batch:
        """Continuous batching through mlx-lm, unless a setting needs the single-stream path.

        mlx-lm's batch generator has no quantized KV cache, so a model with `kv_bits` decodes
        one request at a time through `stream_generate` (with its draft model, if any). A
        `draft` model alone drafts on the batch path (engines/llm/speculate.py).
        """
        if self._config.kv_bits:
            return SerialBatch(self.generate)
        from engines.llm.batch import MLXBatch

        return MLXBatch(self, self._model, self._tokenizer, self._config)

    def generate(self, request: ChatRequest, cancelled: Callable[[], bool]) -> Iterator[Output]:
        """One request through `stream_generate` (quantized KV and draft models live here).

        With the disk tier, the prompt's longest prefix on disk is loaded into the cache the
        rest is prefilled on, and the conversation's blocks are saved when it has run out."""
        import mlx.core as mx
        from mlx_lm import stream_generate
        from mlx_lm.models.cache import make_prompt_cache

        job = self.prepare(request)
        extra = {}
        if self._config.kv_bits:
            extra |= {"kv_bits": self._config.kv_bits, "quantized_kv_start": 0}
            extra |= {"kv_group_size": KV_GROUP_SIZE}
        if self._draft is not None:
            extra |= {"draft_model": self._draft, "num_draft_tokens": self._config.draft.tokens}
        tokens, hit = list(job.prompt), None  # every token the cache will hold, in order
        if self.disk is not None:
            hit = self.disk.find(job.prompt, longer_than=disk_floor(len(job.prompt), self))
            # Handed in, not made inside, so that the conversation's cache can be saved after.
            extra["prompt_cache"] = hit.cache if hit else make_prompt_cache(self._model)
        rest = job.prompt[hit.tokens :] if hit else job.prompt
        run = StreamRun(job.parser)
        echoed = self.prompt_logprobs(request, job.prompt)
        if echoed is not None:
            yield echoed

        def eos(response) -> bool:
            # Counted as the batch path counts: the end-of-sequence token is not output.
            return response.finish_reason == "stop" and response.token in self._eos_ids

        def lead(response) -> Iterator[Output]:
            if job.logprobs is not None and not eos(response):
                yield logprobs_of(response.logprobs, response.token, job.logprobs, job.piece)

        def held(responses):
            for response in responses:
                tokens.append(response.token)
                yield response

        responses = stream_generate(
            self._model,
            self._tokenizer,
            mx.array(rest),
            max_tokens=job.max_tokens,
            sampler=job.sampler,
            logits_processors=list(job.logits_processors) or None,
            **extra,
        )
        yield from run.follow(held(responses), cancelled, lead)
        last = run.last
        new_tokens = last.generation_tokens - eos(last) if last is not None else 0
        if self.disk is not None and run.completed and last is not None:
            self.disk.worth.prefilled(len(rest), len(rest) / max(last.prompt_tps, 1e-9))
            self.disk.save(tokens, extra["prompt_cache"])
        reused = hit.tokens if hit else 0
        disk_load_s = hit.seconds if hit else 0.0
        yield from run.end(
            len(job.prompt),
            new_tokens,
            reused_prefix_tokens=reused,
            reused_disk_tokens=reused,
            disk_load_s=disk_load_s,
        )

    def trim(self) -> None:
        """Free MLX's cache of buffers once the runner is idle (see `EmbeddingEngine.trim`)."""
        release_buffers()

    def unload(self) -> None:
        if self.disk is not None:  # the writes under way finish first
            self.disk.close()
            self.disk = None
        if self._text_encoder is not None:
            self._text_encoder.close()
        self._model = self._tokenizer = self._draft = self._text_encoder = None
        self._detokenizer = None
        release_buffers()

    def _open_disk(self, model, path: Path, held: str) -> tuple[DiskKV | None, str]:
        """The disk tier for this model, or None; and what `model_attached` says of it."""
        config = self._config
        if off := why_off(config, self._disk_dir):
            return None, off
        if config.draft and config.kv_bits:  # mlx-lm's speculative loop reads no blocks
            return None, "off (single-stream decoding with draft and kv_bits)"
        if not cacheable(model):
            return None, "off (this architecture's cache is not in blocks)"
        device = self._platform.device
        shortest = min_tokens(device)
        quantized = (KV_GROUP_SIZE, config.kv_bits) if config.kv_bits else None
        meaning = f"{held}|{config.kv_bits}|{device}"
        disk = DiskKV.open(
            self._disk_dir, config.id, path, meaning, shortest=shortest, quantized=quantized
        )
        where = f"{self._disk_dir.path} (blocks of {BLOCK_TOKENS} tokens"
        if config.kv_bits:  # single stream: no parked caches in RAM, each request reads
            where += f" of the {config.kv_bits}-bit cache, read per request"
        return disk, f"{where}, conversations of {shortest} tokens or more)"

    def _parked_windows(self) -> int:
        """Windows of KV cache the parked sessions may hold together: one per slot, at most
        one per request decoded together (a long conversation fills a whole window)."""
        config = self._config
        if not config.prefix_reuse or config.kv_bits:
            return 0
        return min(config.session_slots, config.concurrency)

    def _decoding_detail(self, draft_weights: int) -> dict[str, str]:
        """How this model decodes, for the `model_attached` line: the YAML, as applied."""
        config = self._config
        batching = f"continuous batching x{config.concurrency}"
        detail = {
            "decoding": "single stream" if config.kv_bits else batching,
            "prefix_reuse": f"{config.session_slots} session slots, at most "
            f"{describe(self.parked_bytes)}"
            if self.parked_bytes
            else "off",
        }
        if config.kv_bits:
            detail["kv_bits"] = str(config.kv_bits)
        if config.draft:
            detail["draft"] = (
                f"{config.draft.model} ({config.draft.tokens} tokens, "
                f"{describe(draft_weights)} of weights)"
            )
        if config.speculation:
            spec = config.speculation
            detail["speculation"] = f"{spec.kind} (up to {spec.tokens} tokens, {spec.ngram}-gram)"
        if config.rate.max_tokens_per_sec:
            detail["rate"] = f"{config.rate.max_tokens_per_sec} tokens/s"
        return detail

    def _weights_held(
        self, model, memory_left: int | None, trained: int, windows: int, draft_per_token: int
    ) -> str:
        """What the weights are held as: the platform's choice (engines/platform.py) for a
        quantized model, unless the model keeps them as stored (`weights: stored`).

        The bfloat16 copy a GPU gets is 3-4x the 4-bit weights: it is taken only where it
        costs no context, the window it leaves being the one the stored weights would get.
        """
        wanted = self._platform.weights
        if wanted not in EXPANDED or self._config.weights == "stored":
            return "as stored"
        if not quantized_layers(model):
            return "as stored"
        if wanted == "float32":  # the CPU: 4-bit kernels are slower than any smaller window
            return wanted
        stored = weight_bytes(model)
        expanded = stored + expansion_bytes(model, 2)
        per_token = kv_per_token(model, wanted, self._config.kv_bits) + draft_per_token

        def window(weights: int) -> int | None:
            try:
                return self._window(trained, weights, per_token, memory_left, windows)
            except ContextTooLarge:
                return None

        if window(expanded) == window(stored):
            return wanted
        return f"as stored ({wanted} would leave a smaller context)"

    def _window(
        self, trained: int, weights: int, per_token: int, memory_left: int | None, windows: int
    ) -> int:
        """The context window these weights leave (`size_context` for this model)."""
        return size_context(
            self._config.id,
            self._config.context.max,
            trained,
            weights,
            per_token,
            memory_left,
            windows,
        )

    def _load_draft(self, tokenizer):
        """The draft model speculation proposes tokens with; it must share `tokenizer`."""
        import mlx.core as mx

        draft = self._draft_config
        path = resolve_source(draft.id, draft.source, base_dir=self._base_dir)
        model, draft_tokenizer = load_model_dir(draft.id, draft.source, path)
        if draft_tokenizer.vocab_size != tokenizer.vocab_size:
            raise SourceError(
                self._config.id, str(path), f"draft model {draft.id!r} has another vocabulary"
            )
        if self._platform.weights == "float32":
            expand_quantized(model)
        mx.eval(model.parameters())
        return model

    def _pick_tool_format(self, tokenizer) -> ToolFormat:
        """The config's `tool_parser`, else the tokenizer's own, else the fallback format."""
        if self._config.tool_parser:
            return load_tool_format(self._config.tool_parser)
        if tokenizer.has_tool_calling:
            return ToolFormat(
                tokenizer.tool_call_start, tokenizer.tool_call_end, tokenizer.tool_parser
            )
        return load_tool_format(DEFAULT_TOOL_PARSER)

    def _encode(self, request: ChatRequest, aside: bool = False) -> list[int]:
        if request.prompt_ids is not None:
            vocab = self._model.args.vocab_size
            if any(not 0 <= t < vocab for t in request.prompt_ids):
                raise BadRequest(f"$.prompt: token ids must be in [0, {vocab})")
            return list(request.prompt_ids)
        if request.raw_prompt is not None:
            return self._text_encoder(request.raw_prompt, aside=aside)
        text = render_chat(self._tokenizer, request, template_messages, fold_system_turns)
        if timeline.ON:  # the chat template is rendered; the tokenizer comes next
            timeline.mark("rendered")
        # The template already wrote any BOS it wants; encoding must not add a second.
        return self._text_encoder(text, add_special_tokens=False, aside=aside)


def load_model_dir(model_id: str, source: str, path: Path):
    """`mlx_lm.load` on the resolved directory; a failure names the source and the path it
    was resolved to (a converted GGUF's cache entry), never a bare `FileNotFoundError`."""
    import mlx_lm

    try:
        return mlx_lm.load(str(path))
    except Exception as error:
        where = source if str(path) == source else f"{source} (loaded from {path})"
        raise SourceError(model_id, where, f"{type(error).__name__}: {error}") from None


def refuse_speculation_on_cuda(model_id: str, platform) -> None:
    """On MLX's CUDA backend a verified draft costs more than the tokens it saves: on an H200
    the 1B shape decoded 0.16-0.23x as fast with prompt lookup as without, at 1, 8 and 64
    streams, though 93 % of the drafts were kept (bench/RESULTS.md, 2026-12-01). Refused at
    load rather than run slower than asked for."""
    if platform.cuda:
        raise ModelUnavailable(
            f"model {model_id!r}: `speculation` is not offered on MLX's CUDA backend (prompt "
            "lookup decoded 0.16-0.23x as fast as plain decoding on an H200): remove "
            "`speculation`"
        )


def refuse_untrimmable(model_id: str, model, key: str = "speculation") -> None:
    """Speculation removes refused draft tokens from the KV cache (the draft model's too): a
    model whose cache keeps no positions to remove (a sliding window, a recurrent state) is
    refused `key` at load."""
    from mlx_lm.models.cache import make_prompt_cache

    kept = {type(c).__name__ for c in make_prompt_cache(model) if not c.is_trimmable()}
    if kept:
        raise ModelUnavailable(
            f"model {model_id!r}: `{key}` needs KV caches that drafts can be removed "
            f"from; this architecture keeps {', '.join(sorted(kept))}: remove `{key}`"
        )


def disk_floor(prompt_tokens: int, engine: MLXEngine) -> int:
    """The tokens a disk hit must beat, as the batch path's (`reuse_min_tokens`): from a
    short shared prefix or under half the prompt, loading costs more than it saves."""
    from engines.llm.batch import reuse_min_tokens

    return max(reuse_min_tokens(engine.platform.device), prompt_tokens // 2) - 1


def kv_per_token(model, weights: str, kv_bits: int | None) -> int:
    """The KV bytes of one token, in the dtype the cache will hold: that of the weights held
    (`_weights_held`)."""
    return kv_bytes_per_token(model.args, held_element(model, weights), kv_bits)
