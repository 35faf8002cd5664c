"""The vision engine on mlx-vlm: a checkpoint with a vision config, served with images.

mlx-vlm does the model work: `load` (model and processor), the checkpoint's chat template,
`prepare_inputs` (the processor: image splitting, marker expansion), `get_input_embeddings`
(the vision tower) and generation: continuous batching on its `BatchGenerator`
(`engines/vision/batch.py`), or `stream_generate` one request at a time where the installed
mlx-vlm has no batch generator. Each request's pictures are decoded, fitted to the pixel
budget and encoded on the model's one thread, so two requests can never swap pictures. A
request without images never touches the vision tower.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from engines.base import Capabilities, LoadInfo
from engines.batch import Batch, SerialBatch
from engines.cache import CacheDir
from engines.compat import refuse_off_task
from engines.errors import BadRequest
from engines.mlx.cache.disk import min_tokens, why_off
from engines.mlx.load import hold, open_source
from engines.mlx.memory import release_buffers
from engines.mlx.prepare import start
from engines.mlx.sizing import (
    auto_streams,
    kv_bytes_per_token,
    size_context,
    streams,
    streams_detail,
    trained_context,
)
from engines.mlx.weights import FLOAT32_EXPANSION
from engines.platform import PlatformPath
from engines.sources.resolve import check_source, resolve_source
from engines.text.constrain import plan_needed
from engines.text.output import DEFAULT_TOOL_PARSER, load_tool_format
from engines.text.reasoning import thinking_markers
from engines.vision.batch import APC_BLOCK_TOKENS
from engines.vision.budget import Plan, cap_processor, geometry_of, plan_pixels
from engines.vision.checkpoint import check_markers, float32_bytes, to_float32
from engines.vision.disk import APCDisk
from engines.vision.inputs import Preprocessor
from engines.vision.prepared import Prepared
from engines.vision.sessions import Sessions
from schemas.canonical import (
    ChatRequest,
    Output,
)
from schemas.config import ModelConfig


class VisionEngine:
    # Image parts get through the runner; a model whose vision is disabled refuses them here.
    capabilities = Capabilities(chat=True, images=True)

    def __init__(
        self,
        model: ModelConfig,
        platform: PlatformPath,
        base_dir: Path | None,
        disk: CacheDir | None = None,
    ) -> None:
        self._declared = model  # as models.yaml says; `_config` as the last load resolved it
        self._config = model
        self._disk_dir = disk
        self.disk: APCDisk | None = None  # the block cache's disk tier, while loaded
        self._platform = platform
        self._base_dir = base_dir
        self._model = self._processor = self._tokenizer = None
        self._context = 0
        self._plan: Plan | None = None
        self._inputs: Preprocessor | None = None  # while loaded
        slots = model.session_slots if model.prefix_reuse else 0
        self._sessions = Sessions(slots)

    def estimate_memory(self) -> int:
        """The weights as they will be held: quantized tensors expanded on the float32 path
        (read from the safetensors headers; a vision tower is often stored unquantized)."""
        path = check_source(self._config.id, self._config.source, base_dir=self._base_dir)
        files = list(path.glob("*.safetensors"))
        if self._held() != "float32":
            return sum(f.stat().st_size for f in files)
        try:
            config = json.loads((path / "config.json").read_text(encoding="utf-8"))
            group = int((config.get("quantization") or {}).get("group_size", 64))
            return sum(float32_bytes(f, group) for f in files)
        except (OSError, ValueError, KeyError, struct.error):
            return sum(f.stat().st_size for f in files) * FLOAT32_EXPANSION

    def _held(self) -> str:
        """How the weights are held: float32 on the CPU path (`weights: auto`), else as
        stored (the bfloat16 copy CUDA gets for text models is not measured for vision)."""
        auto = self._config.weights == "auto"
        return "float32" if auto and self._platform.weights == "float32" else "as stored"

    def load(self, memory_left: int | None = None) -> LoadInfo:
        import mlx_vlm

        config = self._declared  # a later load sizes `concurrency: auto` again
        refuse_off_task(config, "vision")
        path = resolve_source(config.id, config.source, base_dir=self._base_dir)
        model, processor = open_source(
            config.id, config.source, path, mlx_vlm.load, library="mlx-vlm"
        )
        image_token = check_markers(config.id, str(path), model, processor)
        if self._held() == "float32":  # every float weight too, not only the quantized ones
            to_float32(model)
        weights = hold(model, "as stored")
        text = model.config.text_config
        trained = trained_context(text)
        element = 4 if self._held() == "float32" else 2
        per_token = kv_bytes_per_token(text, element)
        geometry = geometry_of(model.config, processor, element)
        wanted = config.context.max
        left = memory_left
        if memory_left is not None and wanted == "auto":
            # A window sized `auto` would take every byte: the vision encoder may first set
            # aside up to half of what the weights leave.
            half = max(0, memory_left - weights) // 2
            left = memory_left - plan_pixels(config.vision, processor, geometry, half).reserved
        sequences = streams(
            config.id,
            config.concurrency,
            wanted,
            trained,
            weights,
            per_token,
            left,
            lambda n: n,
            auto_streams(self._platform.device),
        )
        context = size_context(config.id, wanted, trained, weights, per_token, left, sequences)
        room = (
            None if memory_left is None else memory_left - weights - per_token * context * sequences
        )
        plan = plan_pixels(config.vision, processor, geometry, room)
        if not plan.disabled:
            cap_processor(processor, plan)
        # What this load resolved (`concurrency: auto`) is what the batch reads.
        self._config = msgspec.structs.replace(self._declared, concurrency=sequences)
        self._model, self._processor, self._tokenizer = model, processor, processor.tokenizer
        self._context, self._plan = context, plan
        self._inputs = Preprocessor(config.id, processor, image_token, plan)
        if not plan.disabled and (failure := self._inputs.probe()):
            # e.g. LLaVA-family processors under transformers 5 ("ImagesKwargs got an
            # unexpected keyword argument 'padding'"): text still works, images cannot.
            plan = self._plan = dataclasses.replace(plan, reserved=0, disabled=failure)
            self._inputs.plan = plan
        self._tool_format = load_tool_format(self._config.tool_parser or DEFAULT_TOOL_PARSER)
        self._think = thinking_markers(self._tokenizer)
        self.disk, disk_detail = self._open_disk(model, path, per_token)
        return LoadInfo(
            memory_bytes=weights + per_token * context * sequences + plan.reserved,
            context=context,
            trained_context=trained,
            concurrency=sequences,
            detail={
                "path": str(path),
                "weights": self._held(),
                "kv_bytes_per_token": str(per_token),
                "weights_bytes": str(weights),
                **decoding_detail(self._config),
                "concurrency": streams_detail(
                    self._declared.concurrency, sequences, self._platform.device
                ),
                "vision": plan.describe(),
                "disk_cache": disk_detail,
            },
        )

    def _open_disk(self, model, path: Path, per_token: int) -> tuple[APCDisk | None, str]:
        """The disk tier under mlx-vlm's block cache, or None; and what `model_attached`
        says of it."""
        from mlx_vlm.apc import model_apc_mode

        if off := why_off(self._config, self._disk_dir):
            return None, off
        if not batch_generator_available():
            return None, "off (this mlx-vlm has no batch generator, nor its block cache)"
        if not self._config.session_slots:  # no block cache in RAM for the disk to be under
            return None, "off (session_slots: 0)"
        if model_apc_mode(model.language_model) != "block":
            return None, "off (this architecture's cache is not in blocks)"
        device = self._platform.device
        shortest = min_tokens(device)
        meaning = f"vision|{self._held()}|{device}"
        disk = APCDisk(
            self._disk_dir,
            self._config.id,
            path,
            meaning,
            block_tokens=APC_BLOCK_TOKENS,
            shortest=shortest,
            kv_bytes_per_token=per_token,
        )
        where = f"{self._disk_dir.path} (blocks of {APC_BLOCK_TOKENS} tokens, keyed by image"
        return disk, f"{where}, prompts of {shortest} tokens or more)"

    def count_prompt(self, request: ChatRequest) -> int:
        return len(self._inputs.of(request).ids)

    def open_batch(self) -> Batch:
        """Continuous batching on mlx-vlm's `BatchGenerator` (`engines/vision/batch.py`);
        `generate` (one request through `stream_generate`) where the installed mlx-vlm has
        no batch generator."""
        if not batch_generator_available():
            return SerialBatch(self.generate)
        from engines.vision.batch import VisionBatch

        eos = getattr(self._model.config, "eos_token_id", None) or self._tokenizer.eos_token_id
        eos = sorted({int(t) for t in (eos if isinstance(eos, list) else [eos])})
        return VisionBatch(self, self._model, self._processor, eos, self._config, self._context)

    def prepare(self, request: ChatRequest) -> Prepared:
        """What one generation needs: inputs, sampler, output parser and token budget."""
        if plan_needed(request):  # honour or refuse: mlx-vlm's path has no grammar mask yet
            raise BadRequest(
                f"model {self._config.id!r} (a vision model on mlx-vlm) cannot constrain its "
                "output or report logprobs yet: drop the JSON format, forced or strict tool "
                "calls and logprobs, or use a text model"
            )
        if request.sampling.penalised:  # not carried through mlx-vlm's decoding paths yet
            raise BadRequest(
                f"model {self._config.id!r} (a vision model on mlx-vlm) cannot apply "
                "repeat_penalty, presence_penalty, frequency_penalty or logit_bias: drop "
                "them, or use a text model"
            )
        inputs = self._inputs.of(request)
        begun = start(
            self._config.id,
            inputs.ids,
            self._context,
            request,
            self._tokenizer,
            self._tool_format,
            self._think,
        )
        return Prepared(inputs, begun.sampler, begun.parser, begun.max_tokens)

    def generate(self, request: ChatRequest, cancelled: Callable[[], bool]) -> Iterator[Output]:
        """One request through mlx-vlm's `stream_generate`, on this (the model's) thread: the
        path where the installed mlx-vlm has no batch generator (`engines/vision/single.py`)."""
        from engines.vision.single import generate_one

        prepared = self.prepare(request)
        return generate_one(
            self._model, self._processor, self._sessions, prepared, request, cancelled
        )

    def trim(self) -> None:
        """Free MLX's cache of buffers once the runner is idle (as the MLX engine does)."""
        release_buffers()

    def reasons(self) -> bool:
        """Vision models' templates are not read for thinking here (`reasoning` still applies)."""
        return False

    def unload(self) -> None:
        if self.disk is not None:  # the writes under way finish first
            self.disk.close()
            self.disk = None
        self._model = self._processor = self._tokenizer = None
        self._sessions.clear()
        self._inputs = None
        release_buffers()


def batch_generator_available() -> bool:
    try:
        from mlx_vlm.generate import BatchGenerator  # noqa: F401
    except ImportError:
        return False
    return True


def decoding_detail(config: ModelConfig) -> dict[str, str]:
    """How the model decodes and reuses prefixes, for its `model_attached` line."""
    slots = config.session_slots if config.prefix_reuse else 0
    if batch_generator_available():
        reuse = f"mlx-vlm block cache for {slots} windows, keyed by image" if slots else "off"
        return {
            "decoding": f"continuous batching x{config.concurrency} (mlx-vlm)",
            "prefix_reuse": reuse,
        }
    reuse = f"{slots} session slots" if slots else "off"
    return {"decoding": "single stream (mlx-vlm), requests stepped in turn", "prefix_reuse": reuse}
