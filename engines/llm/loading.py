"""How the text engine loads a model: the toolkit's load recipe (`engines.mlx.load`) on the
source, the draft model beside it, the weights held as the memory left affords, and the
window sized so that every request decoded together and every parked session fits.

The decisions live here; `MLXEngine.load` keeps what comes out (`Loaded`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engines.errors import ContextTooLarge, ModelUnavailable, SourceError
from engines.mlx.experts.sizing import size_resident
from engines.mlx.load import hold, open_source
from engines.mlx.sizing import (
    auto_streams,
    kv_bytes_per_token,
    size_context,
    streams,
    trained_context,
)
from engines.mlx.weights import (
    EXPANDED,
    expansion_bytes,
    held_element,
    quantized_layers,
    weight_bytes,
)
from engines.platform import PlatformPath
from engines.sources.resolve import resolve_source
from engines.units import describe
from schemas.config import ModelConfig


@dataclass(frozen=True)
class Loaded:
    """A text model as loaded: its weights held, its window sized, and what they cost."""

    model: object
    tokenizer: object
    path: Path
    held: str  # what the weights are held as (`weights_held`)
    trained: int  # the trained context
    context: int  # the window
    weights: int  # bytes of weights
    per_token: int  # KV bytes of one token
    windows: int  # windows of KV counted: one a request decoded together, the parked ones
    parked_bytes: int  # the byte limit of the parked sessions' KV caches
    parked_draft_bytes: int  # and of their draft model's caches (`draft:`)
    draft: object | None = None  # the draft model (`draft:`), its weights and KV a token
    draft_weights: int = 0
    draft_per_token: int = 0
    streams: int = 1  # requests decoded together (`concurrency`, `auto` resolved)
    experts: object | None = None  # the cached experts (`experts:`), an ExpertSet
    dense_weights: int = 0  # the weights but the resident experts
    # `auto` past the whole windows the memory holds: the tokens of KV those windows make,
    # shared by the rows (engines/llm/pool.py); None: a whole window a row.
    pool_tokens: int | None = None

    @property
    def memory_bytes(self) -> int:
        """What the budget counts: both models' weights, and a window of both models' KV
        for each request decoded together and each parked session."""
        per_token = self.per_token + self.draft_per_token
        return self.weights + self.draft_weights + per_token * self.context * self.windows


def load_text(
    config: ModelConfig,
    platform: PlatformPath,
    base_dir: Path | None,
    draft_config: ModelConfig | None,
    memory_left: int | None,
    loader: Callable[[Path], tuple] | None = None,
) -> Loaded:
    """Load `config`'s model (through `loader` where given: a rank's shard) and its draft."""
    path = resolve_source(config.id, config.source, base_dir=base_dir)
    if loader is not None:
        model, tokenizer = loader(path)
    elif config.experts is not None:
        # Lazily: the expert stacks are replaced before anything evaluates (reads) them.
        model, tokenizer = open_source(config.id, config.source, path, _lazy_opener)
    else:
        model, tokenizer = open_source(config.id, config.source, path)
    experts = None
    if config.experts is not None:
        experts = install_cache(config, model, path)
    trained = trained_context(getattr(model, "args", None))
    # The draft model first: its weights, and a draft cache beside each window (a request
    # decoded together or a parked session) come out of the memory the window is sized in.
    draft, draft_weights, draft_per_token = None, 0, 0
    if draft_config is not None:
        draft = load_draft(config.id, draft_config, tokenizer, platform, base_dir)
        draft_weights = weight_bytes(draft)
        draft_held = "float32" if platform.weights == "float32" else "as stored"
        draft_per_token = kv_per_token(draft, draft_held, config.kv_bits)
    # The KV caches counted against the budget: one window per request decoded together,
    # and the parked sessions' caches, bounded to `parked` windows in all. `auto` streams
    # are counted on the weights as stored, then again on the weights as held.
    left = None if memory_left is None else memory_left - draft_weights
    stored_per_token = kv_per_token(model, "as stored", config.kv_bits) + draft_per_token
    count = decoded_together(config, platform, trained, left, weight_bytes(model), stored_per_token)
    sizing = Window(config, trained, left, count + parked_windows(config, count))
    held = weights_held(config, platform, model, sizing, draft_per_token)
    weights = dense = hold(model, held)
    per_token = kv_per_token(model, held, config.kv_bits)
    count = decoded_together(config, platform, trained, left, weights, per_token + draft_per_token)
    parked = parked_windows(config, count)
    windows = count + parked
    sizing = Window(config, trained, left, windows)
    if experts is not None:
        # The streams and their windows are sized on the dense weights; the resident experts
        # take what they leave (`experts.resident: auto`), and the window is sized on both.
        window = config.context.max if config.context.max != "auto" else trained
        resident = size_resident(
            config.id,
            config.experts.resident,
            experts.experts,
            experts.expert_bytes,
            dense,
            (per_token + draft_per_token) * window * windows,
            left,
        )
        experts.resize(resident)
        weights = dense + experts.resident_bytes
    context = sizing(weights, per_token + draft_per_token)
    rows, pool = pooled(config, platform, count, context)
    if config.speculation is not None:
        refuse_speculation_on_cuda(config.id, platform)
        refuse_untrimmable(config.id, model)
    # Drafts are verified on the batch path (speculate.py), which trims refused tokens.
    if draft is not None and not config.kv_bits:
        refuse_untrimmable(config.id, model, "draft")
        refuse_untrimmable(config.id, draft, "draft")
    return Loaded(
        model,
        tokenizer,
        path,
        held,
        trained,
        context,
        weights,
        per_token,
        windows,
        per_token * context * parked,
        draft_per_token * context * parked,
        draft,
        draft_weights,
        draft_per_token,
        rows,
        experts,
        dense,
        pool,
    )


def pooled(
    config: ModelConfig, platform: PlatformPath, windows: int, context: int
) -> tuple[int, int | None]:
    """The rows a batch decodes, and the KV pool they share (None: none, a window each).

    `concurrency: auto` where the memory holds fewer whole windows than `auto_streams`:
    that many rows, sharing those `windows` of `context` tokens by what each can reach
    (engines/llm/pool.py). The budget still counts `windows`, which the pool never
    exceeds. A fixed `concurrency` keeps a whole window a row."""
    if config.concurrency != "auto" or config.kv_bits:
        return windows, None
    cap = auto_streams(platform.device)
    if windows >= cap:
        return windows, None
    return cap, windows * context


def decoded_together(
    config: ModelConfig,
    platform: PlatformPath,
    trained: int,
    left: int | None,
    weights: int,
    per_token: int,
) -> int:
    """The requests decoded together (`concurrency`; `auto` by `engines.mlx.sizing.streams`).
    A quantized KV cache decodes one request at a time (mlx-lm's batch has none)."""
    if config.kv_bits and config.concurrency == "auto":
        return 1
    return streams(
        config.id,
        config.concurrency,
        config.context.max,
        trained,
        weights,
        per_token,
        left,
        lambda n: n + parked_windows(config, n),
        auto_streams(platform.device),
    )


def _lazy_opener(path: str) -> tuple:
    import mlx_lm

    return mlx_lm.load(path, lazy=True)


def install_cache(config: ModelConfig, model, path: Path):
    """The expert cache in place of every routed-experts module; a model that routes none is
    refused `experts` by name."""
    from engines.mlx.experts.install import install_experts, switch_modules

    if not switch_modules(model):
        kind = getattr(getattr(model, "args", None), "model_type", type(model).__name__)
        raise ModelUnavailable(
            f"model {config.id!r}: `experts` applies to a mixture-of-experts model (mlx-lm's "
            f"SwitchGLU/SwitchMLP); this one ({kind}) routes no experts: remove `experts`"
        )
    # One expert a layer until the dense weights are weighed (`size_resident`).
    return install_experts(config.id, model, path, 1, config.experts.policy)


def experts_detail(loaded: Loaded) -> dict:
    """What `model_attached` says of the cached experts."""
    experts = loaded.experts
    if experts is None:
        return {}
    return {
        "dense_bytes": str(loaded.dense_weights),
        "expert_bytes_on_disk": str(experts.disk_bytes),
        "experts_resident": f"{experts.resident} of {experts.experts} per layer ({experts.policy})",
        "experts_resident_bytes": str(experts.resident_bytes),
    }


@dataclass(frozen=True)
class Window:
    """The context window weights of a size leave (`size_context` for this model)."""

    config: ModelConfig
    trained: int
    memory_left: int | None
    windows: int

    def __call__(self, weights: int, per_token: int) -> int:
        return size_context(
            self.config.id,
            self.config.context.max,
            self.trained,
            weights,
            per_token,
            self.memory_left,
            self.windows,
        )


def weights_held(
    config: ModelConfig, platform: PlatformPath, model, window: Window, draft_per_token: int
) -> str:
    """What the weights are held as: the platform's choice (engines/platform.py) for a
    quantized model, unless the model keeps them as stored (`weights: stored`).

    The bfloat16 copy a GPU gets is 3-4x the 4-bit weights: it is taken only where it costs
    no context, the window it leaves being the one the stored weights would get.
    """
    wanted = platform.weights
    if wanted not in EXPANDED or config.weights == "stored":
        return "as stored"
    if not quantized_layers(model):
        return "as stored"
    if wanted == "float32":  # the CPU: 4-bit kernels are slower than any smaller window
        return wanted
    stored = weight_bytes(model)
    expanded = stored + expansion_bytes(model, 2)
    per_token = kv_per_token(model, wanted, config.kv_bits) + draft_per_token

    def fits(weights: int) -> int | None:
        try:
            return window(weights, per_token)
        except ContextTooLarge:
            return None

    if fits(expanded) == fits(stored):
        return wanted
    return f"as stored ({wanted} would leave a smaller context)"


def load_draft(
    model_id: str, draft: ModelConfig, tokenizer, platform: PlatformPath, base_dir: Path | None
):
    """The draft model speculation proposes tokens with; it must share `tokenizer`. Expanded
    on the CPU whatever its keys (its 4-bit kernels would cost more than the draft saves)."""
    path = resolve_source(draft.id, draft.source, base_dir=base_dir)
    model, draft_tokenizer = open_source(draft.id, draft.source, path)
    if draft_tokenizer.vocab_size != tokenizer.vocab_size:
        raise SourceError(model_id, str(path), f"draft model {draft.id!r} has another vocabulary")
    hold(model, "float32" if platform.weights == "float32" else "as stored")
    return model


def parked_windows(config: ModelConfig, streams: int) -> int:
    """Windows of KV cache the parked sessions may hold together: one per slot, at most one
    per request decoded together (`streams`: a long conversation fills a whole window)."""
    if not config.prefix_reuse or config.kv_bits:
        return 0
    return min(config.session_slots, streams)


def decoding_detail(config: ModelConfig, parked_bytes: int, draft_weights: int) -> dict:
    """How this model decodes, for the `model_attached` line: the YAML, as applied."""
    batching = f"continuous batching x{config.concurrency}"
    detail = {
        "decoding": "single stream" if config.kv_bits else batching,
        "prefix_reuse": f"{config.session_slots} session slots, at most {describe(parked_bytes)}"
        if parked_bytes
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


def refuse_speculation_on_cuda(model_id: str, platform) -> None:
    """On MLX's CUDA backend a verified draft costs more than the tokens it saves: on an H200
    the 1B shape decoded 0.16-0.23x as fast with prompt lookup as without, at 1, 8 and 64
    streams, though 93 % of the drafts were kept (bench/RESULTS.md, 2026-12-01). Refused at
    load rather than run slower than asked for. The cause, measured on an H100 (2026-12-07):
    a multi-row pass at a new key length gets a new cuDNN SDPA plan (45-54 ms against 4 ms);
    with MLX_CUDA_USE_CUDNN_SDPA=0 it costs 4-9 ms, so the refusal can go once speculation is
    measured that way."""
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


def kv_per_token(model, weights: str, kv_bits: int | None) -> int:
    """The KV bytes of one token, in the dtype the cache will hold: that of the weights held
    (`weights_held`)."""
    return kv_bytes_per_token(model.args, held_element(model, weights), kv_bits)
