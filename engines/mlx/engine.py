"""The MLX engine on mlx-lm: load, chat template, sampling, stop strings, engine-side counts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from engines.base import Capabilities, LoadInfo
from engines.batch import Batch, SerialBatch
from engines.errors import BadRequest, ContextOverflow, ContextTooLarge, SourceError
from engines.mlx.constrain import Grammar
from engines.mlx.context import size_context
from engines.mlx.facts import source_chat_template
from engines.mlx.logprobs import logprobs_of
from engines.mlx.sampling import make_request_sampler
from engines.platform import PlatformPath
from engines.residency import describe
from engines.sources.resolve import check_source, resolve_source
from engines.text.output import DEFAULT_TOOL_PARSER, OutputParser, ToolFormat, load_tool_format
from engines.text.reasoning import template_kwargs, template_reasons, thinking_markers
from engines.text.tools import (
    fold_system_turns,
    template_knows_tools,
    template_messages,
    tool_specs,
)
from schemas.canonical import (
    ChatRequest,
    Logprobs,
    Output,
)
from schemas.config import ModelConfig

# 4-bit weights (plus scales) grow about this much when expanded to float32.
FLOAT32_EXPANSION = 6
# What a platform may expand quantized weights to (PlatformPath.weights).
EXPANDED = ("float32", "bfloat16")


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
    ) -> None:
        self._config = model
        self._draft_config = draft
        self._draft = None
        self._platform = platform
        self._base_dir = base_dir
        self._model = None
        self._tokenizer = None
        self._context = 0
        self.parked_bytes = 0  # the byte limit of the parked sessions' KV caches
        self._tool_format: ToolFormat | None = None
        self._grammar = None  # the model's grammar tools (engines/mlx/constrain.py)

    @property
    def platform(self) -> PlatformPath:
        return self._platform

    def reasons(self) -> bool:
        """Whether the model thinks before it answers: its chat template says so (read from
        the loaded tokenizer, or a model directory's tokenizer files without loading)."""
        if self._tokenizer is not None:
            return bool(getattr(self._tokenizer, "has_thinking", False)) or template_reasons(
                self._tokenizer.chat_template
            )
        return template_reasons(source_chat_template(self._config, self._base_dir))

    def estimate_memory(self) -> int:
        """The source's size on disk, times the float32 expansion where the CPU path does it."""
        path = check_source(self._config.id, self._config.source, base_dir=self._base_dir)
        files = [path] if path.is_file() else list(path.glob("*.safetensors"))
        on_disk = sum(f.stat().st_size for f in files)
        # The bfloat16 copy (CUDA) is taken only where the memory left affords it (`load`).
        expands = self._platform.weights == "float32" and self._config.weights == "auto"
        return on_disk * (FLOAT32_EXPANSION if expands else 1)

    def load(self, memory_left: int | None = None) -> LoadInfo:
        import mlx.core as mx

        path = resolve_source(self._config.id, self._config.source, base_dir=self._base_dir)
        model, tokenizer = load_model_dir(self._config.id, self._config.source, path)
        trained = trained_context(model)
        # The KV caches counted against the budget: one window per request decoded
        # together, and the parked sessions' caches, bounded to `parked` windows in all.
        parked = self._parked_windows()
        windows = self._config.concurrency + parked
        held = self._weights_held(model, memory_left, trained, windows)
        if held in EXPANDED:
            expand_quantized(model, held)
        mx.eval(model.parameters())
        weights = weight_bytes(model)
        per_token = kv_bytes_per_token(model, held, self._config.kv_bits)
        self._context = self._window(trained, weights, per_token, memory_left, windows)
        self.parked_bytes = per_token * self._context * parked
        self._model, self._tokenizer = model, tokenizer
        self._eos_ids = set(tokenizer.eos_token_ids)
        self._tool_format = self._pick_tool_format(tokenizer)
        self._think = thinking_markers(tokenizer)
        self._grammar = Grammar(model, tokenizer, self._think, self._tool_format)
        if self._draft_config is not None:
            self._draft = self._load_draft()
        return LoadInfo(
            memory_bytes=weights + per_token * self._context * windows,
            context=self._context,
            trained_context=trained,
            detail={
                "path": str(path),
                "weights": held,
                "kv_bytes_per_token": str(per_token),
                **self._decoding_detail(),
            },
        )

    def count_prompt(self, request: ChatRequest) -> int:
        return len(self._encode(request))

    def prepare(self, request: ChatRequest) -> Prepared:
        """Everything one generation needs: prompt tokens, budget, sampler, output parser."""
        prompt = self._encode(request)
        window = request.window_of(self._context)
        if len(prompt) >= window:
            raise ContextOverflow(self._config.id, len(prompt), window)
        sampler, processors = self.decoding(request)
        tail = self._tokenizer.decode(prompt[-8:])  # has the template opened a think block?
        parser = OutputParser.for_request(request, self._tool_format, self._think, tail)
        max_tokens = min(request.max_tokens, window - len(prompt))
        # The grammar's mask (engines/mlx/constrain.py) joins the request's processors.
        processors = [*processors, *self._grammar.processors(request, tail)]
        top = request.logprobs.top if request.logprobs else None
        piece = self._grammar.piece if request.logprobs else None
        seed = request.sampling.seed
        return Prepared(prompt, max_tokens, sampler, parser, seed, tuple(processors), top, piece)

    def decoding(self, request: ChatRequest) -> tuple[Callable, list[Callable]]:
        """The request's sampler and logits processors: every decoding path takes these."""
        sampling = request.sampling
        sampler = make_request_sampler(
            sampling.temperature, sampling.top_p, sampling.min_p, sampling.top_k, sampling.seed
        )
        return sampler, []

    def prompt_logprobs(self, request: ChatRequest, prompt: list[int]) -> Logprobs | None:
        """The prompt's own token logprobs, when the request asked for them (echo)."""
        if not (request.logprobs and request.logprobs.prompt):
            return None
        from engines.mlx.logprobs import prompt_logprobs

        tokens = prompt_logprobs(self._model, prompt, request.logprobs.top, self._grammar.piece)
        return Logprobs(tokens=tokens, prompt=True)

    def open_batch(self) -> Batch:
        """Continuous batching through mlx-lm, unless a setting needs the single-stream path.

        mlx-lm's batch generator has no quantized KV cache and no draft model, so a model
        with `kv_bits` or `draft` decodes one request at a time through `stream_generate`.
        """
        if self._config.kv_bits or self._draft is not None:
            return SerialBatch(self.generate)
        from engines.mlx.batch import MLXBatch

        return MLXBatch(self, self._model, self._tokenizer, self._config)

    def generate(self, request: ChatRequest, cancelled: Callable[[], bool]) -> Iterator[Output]:
        """One request through `stream_generate` (quantized KV and draft models live here)."""
        import mlx.core as mx
        from mlx_lm import stream_generate

        job = self.prepare(request)
        extra = {}
        if self._config.kv_bits:
            extra |= {"kv_bits": self._config.kv_bits, "quantized_kv_start": 0}
        if self._draft is not None:
            extra |= {"draft_model": self._draft, "num_draft_tokens": self._config.draft.tokens}
        parser = job.parser
        started = time.perf_counter()
        echoed = self.prompt_logprobs(request, job.prompt)
        if echoed is not None:
            yield echoed
        first_at = None
        new_tokens, stop_reason = 0, "stop"
        for response in stream_generate(
            self._model,
            self._tokenizer,
            mx.array(job.prompt),
            max_tokens=job.max_tokens,
            sampler=job.sampler,
            logits_processors=list(job.logits_processors) or None,
            **extra,
        ):
            first_at = first_at or time.perf_counter()
            # Counted as the batch path counts: the end-of-sequence token is not output.
            eos = response.finish_reason == "stop" and response.token in self._eos_ids
            new_tokens = response.generation_tokens - eos
            if job.logprobs is not None and not eos:
                yield logprobs_of(response.logprobs, response.token, job.logprobs, job.piece)
            yield from parser.feed(response.text)
            if parser.stopped:
                stop_reason = "stop_string"
                break
            if response.finish_reason:
                stop_reason = response.finish_reason
            if cancelled():
                stop_reason = "cancelled"
                break
        yield from parser.end(
            stop_reason,
            started=started,
            first_at=first_at,
            prompt_tokens=len(job.prompt),
            new_tokens=new_tokens,
        )

    def trim(self) -> None:
        """Free MLX's cache of buffers once the runner is idle (see `EmbeddingEngine.trim`)."""
        import mlx.core as mx

        mx.clear_cache()

    def unload(self) -> None:
        import mlx.core as mx

        self._model = self._tokenizer = self._draft = None
        mx.clear_cache()

    def _parked_windows(self) -> int:
        """Windows of KV cache the parked sessions may hold together: one per slot, at most
        one per request decoded together (a long conversation fills a whole window)."""
        config = self._config
        if not config.prefix_reuse or config.kv_bits or config.draft:
            return 0
        return min(config.session_slots, config.concurrency)

    def _decoding_detail(self) -> dict[str, str]:
        """How this model decodes, for the `model_attached` line: the YAML, as applied."""
        config = self._config
        serial = config.kv_bits or config.draft
        detail = {
            "decoding": "single stream" if serial else f"continuous batching x{config.concurrency}",
            "prefix_reuse": f"{config.session_slots} session slots, at most "
            f"{describe(self.parked_bytes)}"
            if self.parked_bytes
            else "off",
        }
        if config.kv_bits:
            detail["kv_bits"] = str(config.kv_bits)
        if config.draft:
            detail["draft"] = f"{config.draft.model} ({config.draft.tokens} tokens)"
        if config.rate.max_tokens_per_sec:
            detail["rate"] = f"{config.rate.max_tokens_per_sec} tokens/s"
        return detail

    def _weights_held(self, model, memory_left: int | None, trained: int, windows: int) -> str:
        """What the weights are held as: the platform's choice (engines/mlx/platform.py) for a
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
        per_token = kv_bytes_per_token(model, wanted, self._config.kv_bits)

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

    def _load_draft(self):
        """The draft model speculation proposes tokens with; it must share the tokenizer."""
        import mlx.core as mx

        draft = self._draft_config
        path = resolve_source(draft.id, draft.source, base_dir=self._base_dir)
        model, tokenizer = load_model_dir(draft.id, draft.source, path)
        if tokenizer.vocab_size != self._tokenizer.vocab_size:
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

    def _encode(self, request: ChatRequest) -> list[int]:
        if request.prompt_ids is not None:
            vocab = self._model.args.vocab_size
            if any(not 0 <= t < vocab for t in request.prompt_ids):
                raise BadRequest(f"$.prompt: token ids must be in [0, {vocab})")
            return list(request.prompt_ids)
        if request.raw_prompt is not None:
            return self._tokenizer.encode(request.raw_prompt)
        knows_tools = template_knows_tools(self._tokenizer.chat_template)
        messages = template_messages(request.messages, request.tools, knows_tools)
        extra = {"tools": tool_specs(request.tools)} if request.tools and knows_tools else {}
        extra |= template_kwargs(request.reasoning)
        try:
            text = self._tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False, **extra
            )
        except Exception:
            # Templates that allow a system turn only first: fold later ones into it.
            folded = fold_system_turns(messages)
            if folded is None:
                raise
            text = self._tokenizer.apply_chat_template(
                folded, add_generation_prompt=True, tokenize=False, **extra
            )
        # The template already wrote any BOS it wants; encoding must not add a second.
        return self._tokenizer.encode(text, add_special_tokens=False)


def load_model_dir(model_id: str, source: str, path: Path):
    """`mlx_lm.load` on the resolved directory; a failure names the source and the path it
    was resolved to (a converted GGUF's cache entry), never a bare `FileNotFoundError`."""
    import mlx_lm

    try:
        return mlx_lm.load(str(path))
    except Exception as error:
        where = source if str(path) == source else f"{source} (loaded from {path})"
        raise SourceError(model_id, where, f"{type(error).__name__}: {error}") from None


def kv_bytes_per_token(model, weights: str, kv_bits: int | None) -> int:
    """Keys and values of every layer for one token, in the dtype the cache will hold: that
    of the weights held (`_weights_held`), float32 when expanded to it, else the model's
    own floating dtype (a quantized model's scales)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    args = model.args
    heads = getattr(args, "num_key_value_heads", None) or args.num_attention_heads
    head_dim = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    if weights in EXPANDED:
        element = 4 if weights == "float32" else 2
    else:
        floating = (
            v for _, v in tree_flatten(model.parameters()) if mx.issubdtype(v.dtype, mx.floating)
        )
        element = next(floating).dtype.size
    per_token = 2 * args.num_hidden_layers * heads * head_dim * element
    return per_token * kv_bits // (8 * element) if kv_bits else per_token


def trained_context(model) -> int:
    args = getattr(model, "args", None)
    return int(getattr(args, "max_position_embeddings", None) or 4096)


def quantized_layers(model) -> list:
    """(name, module) of every quantized linear or embedding layer."""
    import mlx.nn as nn

    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.QuantizedLinear | nn.QuantizedEmbedding)
    ]


def weight_bytes(model) -> int:
    """The bytes of every parameter, as held now (known from the shapes: nothing is computed)."""
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def expansion_bytes(model, element: int) -> int:
    """How much the weights grow when every quantized layer becomes `element`-byte values
    (known from the shapes: nothing is computed)."""
    grown = 0
    for _, module in quantized_layers(model):
        rows, packed = module.weight.shape
        dense = rows * packed * 32 // module.bits * element
        held = sum(getattr(module, k).nbytes for k in ("weight", "scales", "biases") if k in module)
        grown += dense - held
    return grown


def expand_as_platform(model, platform: PlatformPath) -> str:
    """Hold `model`'s weights as `platform` runs them fastest, with no memory check (for the
    benchmarks' in-process references); what they are held as."""
    if platform.weights not in EXPANDED or not quantized_layers(model):
        return "as stored"
    expand_quantized(model, platform.weights)
    return platform.weights


def expand_quantized(model, dtype: str = "float32") -> None:
    """Replace quantized layers by dense ones of `dtype` (one of EXPANDED): faster on the
    CPU and, for batches, on CUDA (see engines/mlx/platform.py)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_unflatten

    dtype = getattr(mx, dtype)
    swaps = []
    for name, module in quantized_layers(model):
        weight = mx.dequantize(
            module.weight, module.scales, module.biases, module.group_size, module.bits
        ).astype(dtype)
        if isinstance(module, nn.QuantizedLinear):
            dense = nn.Linear(weight.shape[1], weight.shape[0], bias="bias" in module)
            if "bias" in module:
                dense.bias = module.bias.astype(dtype)
        else:
            dense = nn.Embedding(weight.shape[0], weight.shape[1])
        dense.weight = weight
        swaps.append((name, dense))
    if swaps:
        model.update_modules(tree_unflatten(swaps))
