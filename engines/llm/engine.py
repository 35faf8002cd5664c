"""The MLX text engine on mlx-lm: what the runtime calls (`Engine`), the single-stream path
(`generate`, for `kv_bits`), and the batch it opens. Loading is `loading.py`'s, a request's
tokens and sampler `prepared.py`'s, continuous batching `batch.py`'s."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from engines.base import Capabilities, LoadInfo
from engines.batch import Batch, SerialBatch
from engines.cache import CacheDir
from engines.errors import BadRequest
from engines.llm.loading import decoding_detail, experts_detail, load_text
from engines.llm.prepared import Prepared, Preparer
from engines.mlx.cache.blocks import model_layout
from engines.mlx.cache.disk import BLOCK_TOKENS, DiskKV, cacheable, min_tokens, why_off
from engines.mlx.cache.prefix import reuse_min_tokens
from engines.mlx.facts import source_chat_template
from engines.mlx.logprobs import logprobs_of
from engines.mlx.memory import release_buffers
from engines.mlx.sizing import streams_detail
from engines.mlx.stream import StreamRun
from engines.mlx.weights import FLOAT32_EXPANSION
from engines.platform import PlatformPath
from engines.sources.resolve import check_source
from engines.text.reasoning import template_reasons
from schemas.canonical import ChatRequest, Output, PromptRead
from schemas.config import ModelConfig
from schemas.logprobs import Logprobs

# The group size of a quantized KV cache (`kv_bits`): mlx-lm's default, named because the
# disk tier's blocks are rebuilt as `QuantizedKVCache`s of it.
KV_GROUP_SIZE = 64


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
        self._declared = model  # as models.yaml says; `_config` as the last load resolved it
        self._config = model
        self._disk_dir = disk
        self.disk: DiskKV | None = None  # the KV cache's disk tier, while loaded
        # How the weights load from the resolved path (a rank's shard: engines/llm/distributed).
        self._loader = loader
        self._draft_config = draft
        self._platform = platform
        self._base_dir = base_dir
        self._preparer: Preparer | None = None
        # The loaded models (read by the benchmarks and tests too), while loaded.
        self._model = self._tokenizer = self._draft = None
        self.parked_bytes = 0  # the byte limit of the parked sessions' KV caches
        self.parked_draft_bytes = 0  # and of their draft model's caches (`draft:`)
        self.kv_pool = None  # tokens of KV the batch's rows share (engines/llm/pool.py)
        self.experts = None  # the cached experts (`experts:`, an ExpertSet), while loaded
        self.adapters = None  # the attached adapters (`adapters:`, an AdapterSet), while loaded
        # The steering vectors (`steering:`, the base's and its adapters'), while loaded.
        self.steering = None

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
        expansion = FLOAT32_EXPANSION if float32 and self._config.weights == "auto" else 1
        # The bfloat16 copy (CUDA) is taken only where the memory left affords it (`load`).
        if self._config.experts is not None:
            total = self._estimate_with_experts(expansion)
        else:
            total = self._on_disk(self._config) * expansion
        if self._draft_config is not None:  # a draft is expanded on the CPU whatever its keys
            total += self._on_disk(self._draft_config) * (FLOAT32_EXPANSION if float32 else 1)
        return total

    def _estimate_with_experts(self, expansion: int) -> int:
        """`experts:`: the dense tensors (expanded as the others) and the resident experts
        (kept as stored), `auto` counting one a layer, the least it loads with."""
        from engines.mlx.experts.files import quantized_config, stored_split

        path = check_source(self._config.id, self._config.source, base_dir=self._base_dir)
        if path.is_file():  # a GGUF: converted at load, where `experts` is checked
            return path.stat().st_size * expansion
        dense, stacked, experts = stored_split(self._config.id, path)
        if not quantized_config(path):  # float weights are held as they are
            expansion = 1
        resident = self._config.experts.resident
        share = 1 if resident == "auto" else min(int(resident), experts or 1)
        return dense * expansion + stacked * share // max(experts, 1)

    def _on_disk(self, config: ModelConfig) -> int:
        path = check_source(config.id, config.source, base_dir=self._base_dir)
        files = [path] if path.is_file() else list(path.glob("*.safetensors"))
        return sum(f.stat().st_size for f in files)

    def load(self, memory_left: int | None = None) -> LoadInfo:
        loaded = load_text(
            self._declared,
            self._platform,
            self._base_dir,
            self._draft_config,
            memory_left,
            self._loader,
        )
        # What this load resolved (`concurrency: auto`) is what the batch and preparer read.
        config = self._config = msgspec.structs.replace(self._declared, concurrency=loaded.streams)
        self._model, self._tokenizer, self._draft = loaded.model, loaded.tokenizer, loaded.draft
        self.experts = loaded.experts  # the cached experts (`experts:`), or None
        self.parked_bytes, self.parked_draft_bytes = loaded.parked_bytes, loaded.parked_draft_bytes
        self.kv_pool = loaded.pool_tokens
        self._preparer = Preparer(config, loaded.model, loaded.tokenizer, loaded.context)
        self.steering = self._steer(loaded.model) if config.steering or config.adapters else None
        self.disk, disk_detail = self._open_disk(loaded.model, loaded.path, loaded.held)
        adapter_detail, adapter_bytes = {}, 0
        if config.adapters:
            from engines.llm.adapters import attach

            self.adapters = attach(
                config.id,
                loaded.model,
                config.adapters,
                self._base_dir,
                self.steering,
                config.hf_token,
            )
            adapter_bytes = self.adapters.nbytes
            adapter_detail = adapters_detail(self.adapters, loaded.weights)
            # Rows under an adapter neither read nor write the disk tier (base rows do).
        steering = {}
        if self.steering is not None:
            adapter_bytes += self.steering.nbytes
            steering = self.steering.announced(self.adapters.current if self.adapters else None)
        return LoadInfo(
            memory_bytes=loaded.memory_bytes + adapter_bytes,
            weights_bytes=loaded.weights + loaded.draft_weights + adapter_bytes,
            context=loaded.context,
            trained_context=loaded.trained,
            concurrency=loaded.streams,
            detail={
                "path": str(loaded.path),
                "weights": loaded.held,
                "kv_bytes_per_token": str(loaded.per_token),
                **decoding_detail(config, self.parked_bytes, loaded.draft_weights),
                "concurrency": streams_detail(
                    self._declared.concurrency,
                    loaded.streams,
                    self._platform.device,
                    loaded.pool_tokens,
                ),
                "disk_cache": disk_detail,
                **experts_detail(loaded),
                **adapter_detail,
            },
            steering=steering,
        )

    def _steer(self, model):
        """The model's steering vectors: the base's own (`steering:`) now, its adapters'
        as they attach; `ModelUnavailable` naming `steering` for a file that does not fit."""
        from engines.llm.steering import SteeringSet, read_steered

        steering = SteeringSet(self._config.id, model)
        if self._config.steering is not None:
            who = f"model {self._config.id!r}"
            steering.set_base(
                read_steered(who, self._config.steering, self._base_dir, steering.shape)
            )
        return steering

    def narrow_window(self, context: int) -> None:
        """Hold the window to `context` tokens: the ranks of a sharded model decode with the
        smallest any of them can hold, so each refuses, truncates and parks as the others."""
        wide = max(self._preparer.context, 1)
        self.parked_bytes = self.parked_bytes * context // wide
        self.parked_draft_bytes = self.parked_draft_bytes * context // wide
        self._preparer.context = context
        if self.kv_pool is not None:
            self.kv_pool = self.kv_pool * context // wide

    def count_prompt(self, request: ChatRequest) -> int:
        return self._preparer.count(request)

    def prepare(self, request: ChatRequest, *, aside: bool = False) -> Prepared:
        """Everything one generation needs (`Preparer.prepare`), under its adapter."""
        job = self._preparer.prepare(request, aside=aside)
        if request.adapter is None:
            return job
        if self.adapters is not None:
            self.adapters.apply_staged()  # a reload's adapters, before this row names one
        if self.adapters is None or request.adapter not in self.adapters.known:
            raise BadRequest(f"model {self._config.id!r} has no adapter {request.adapter!r}")
        try:
            scale = self.adapters.scale_of(request.adapter, request.adapter_scale)
        except ValueError as refused:
            raise BadRequest(f"$.lora[0].scale: {refused}") from None
        return job._replace(adapter=self.adapters.slot(request.adapter), adapter_scale=scale)

    def change_adapters(self, adapters: list) -> None:
        """A reload's `adapters:` for this base, which stays loaded: read and checked now
        (`ModelUnavailable` naming the adapter, nothing changed), in force from the next
        forward pass; rows decoding under a removed adapter finish under it. Unloaded, the
        next load attaches them."""
        if self.adapters is not None:
            self.adapters.stage(adapters)
        self._declared = msgspec.structs.replace(self._declared, adapters=list(adapters))
        self._config = msgspec.structs.replace(self._config, adapters=list(adapters))

    def prompt_logprobs(self, request: ChatRequest, prompt: list[int]) -> Logprobs | None:
        """The prompt's own token logprobs, when the request asked for them (echo)."""
        return self._preparer.prompt_logprobs(request, prompt)

    def detokenizer(self):
        """A streaming detokenizer for one sequence (`Preparer.detokenizer`)."""
        return self._preparer.detokenizer()

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
            return response.finish_reason == "stop" and response.token in self._preparer.eos_ids

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
        reused = hit.tokens if hit else 0
        read = PromptRead(prompt_tokens=len(job.prompt), cached_tokens=reused)
        yield from run.follow(held(responses), cancelled, lead, read=lambda _: read)
        last = run.last
        new_tokens = last.generation_tokens - eos(last) if last is not None else 0
        on_disk = 0
        if self.disk is not None and run.completed and last is not None:
            self.disk.worth.prefilled(len(rest), len(rest) / max(last.prompt_tps, 1e-9))
            on_disk = self.disk.save(tokens, extra["prompt_cache"], force=bool(job.keep))
        yield from run.end(
            len(job.prompt),
            new_tokens,
            reused_prefix_tokens=reused,
            reused_disk_tokens=reused,
            cache_written_tokens=max(0, min(on_disk, len(job.prompt)) - reused),
            disk_load_s=hit.seconds if hit else 0.0,
        )

    def trim(self) -> None:
        """Free MLX's cache of buffers once the runner is idle (see `EmbeddingEngine.trim`)."""
        release_buffers()

    def unload(self) -> None:
        if self.disk is not None:  # the writes under way finish first
            self.disk.close()
            self.disk = None
        if self._preparer is not None:
            self._preparer.close()
        self._model = self._tokenizer = self._draft = None
        self._preparer = None
        self.steering = self.adapters = None
        if self.experts is not None:  # the expert files' descriptors
            self.experts.close()
            self.experts = None
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
        steered = self.steering.by_id[0] if self.steering is not None else None
        if steered is not None:  # a base prefix computed under its vector means that vector
            meaning += f"|steering {steered.file.sha256} {steered.layers} {steered.config.scale}"
        disk = DiskKV.open(
            self._disk_dir,
            config.id,
            path,
            meaning,
            shortest=shortest,
            quantized=quantized,
            layout=model_layout(model, quantized),
        )
        where = f"{self._disk_dir.path} (blocks of {BLOCK_TOKENS} tokens"
        if config.kv_bits:  # single stream: no parked caches in RAM, each request reads
            where += f" of the {config.kv_bits}-bit cache, read per request"
        return disk, f"{where}, conversations of {shortest} tokens or more)"


def disk_floor(prompt_tokens: int, engine: MLXEngine) -> int:
    """The tokens a disk hit must beat, as the batch path's (`reuse_min_tokens`): from a
    short shared prefix or under half the prompt, loading costs more than it saves."""
    return max(reuse_min_tokens(engine.platform.device), prompt_tokens // 2) - 1


def adapters_detail(adapters, base_bytes: int) -> dict:
    """The `model_attached` line's word on the adapters: the base's weights, held once, and
    what the adapters add to them."""
    from engines.units import describe

    return {
        "adapters": adapters.describe(),
        "adapter_bytes": f"{adapters.nbytes} ({describe(adapters.nbytes)}) beside {base_bytes} "
        f"({describe(base_bytes)}) of base weights, held once",
    }
