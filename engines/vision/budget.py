"""The pixel budget: how many pixels an image may keep, and what encoding one costs.

Defaults come from the checkpoint's own preprocessor config; the declared `vision.max_pixels`
is clamped at load to what the memory budget can afford next to the weights and the KV
cache, and when not even `min_pixels` fits, vision is disabled (text keeps working). Each
image is resized to fit before the processor sees it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engines.units import describe
from schemas.config import VisionSettings

# Activations held while the vision tower runs, over the one layer's worth counted below:
# attention scores, the MLP's intermediate, residuals and the tower's outputs side by side.
ACTIVATION_SLACK = 2


@dataclass(frozen=True)
class Geometry:
    """What the vision tower does with pixels: its patch, tile and layer sizes."""

    patch: int
    tile: int | None  # tiled processors (idefics3/SmolVLM) encode fixed tiles plus a global one
    hidden: int
    intermediate: int
    heads: int
    element: int  # bytes per activation (4 on the float32 CPU path)

    def encode_bytes(self, pixels: int) -> int:
        """Peak bytes of encoding one image of `pixels` pixels (an estimate, on the high side)."""
        if self.tile:
            per = (self.tile // self.patch) ** 2
            sequences = math.ceil(pixels / self.tile**2) + 1
        else:
            per, sequences = max(1, pixels // self.patch**2), 1
        layer = self.heads * per * per + per * (3 * self.hidden + self.intermediate)
        return sequences * layer * self.element * ACTIVATION_SLACK

    def affordable(self, room: int) -> int:
        """The most pixels whose encoding fits in `room` bytes (0 if none)."""
        low, high = 0, 1 << 34
        while low < high:
            middle = (low + high + 1) // 2
            if self.encode_bytes(middle) <= room:
                low = middle
            else:
                high = middle - 1
        return low


def geometry_of(config, processor, element: int) -> Geometry:
    """The vision tower's sizes from the checkpoint's config and image processor."""
    vision = config.vision_config
    image = getattr(processor, "image_processor", None)
    tile = _edge(getattr(image, "max_image_size", None))
    return Geometry(
        patch=int(getattr(vision, "patch_size", 14) or 14),
        tile=tile,
        hidden=int(getattr(vision, "hidden_size", 1024) or 1024),
        intermediate=int(getattr(vision, "intermediate_size", 4096) or 4096),
        heads=int(getattr(vision, "num_attention_heads", 16) or 16),
        element=element,
    )


def checkpoint_pixels(processor) -> tuple[int, int]:
    """(min_pixels, max_pixels) as the checkpoint's image processor has them.

    Qwen-style processors say `min_pixels`/`max_pixels` (or carry them in `size`); tiled
    ones (idefics3) resize to `size.longest_edge` and encode `max_image_size` tiles, so one
    tile is the least worth encoding; fixed-size ones (`size.height`/`width`) take that.
    """
    image = getattr(processor, "image_processor", None)
    size = _as_dict(getattr(image, "size", None))
    high = getattr(image, "max_pixels", None) or size.get("max_pixels")
    low = getattr(image, "min_pixels", None) or size.get("min_pixels")
    if not high and (edge := size.get("longest_edge")):
        high = edge * edge
    if not high and size.get("height") and size.get("width"):
        high = size["height"] * size["width"]
    if not low and (tile := _edge(getattr(image, "max_image_size", None))):
        low = tile * tile
    high = int(high or 1024 * 1024)
    return min(int(low or 28 * 28), high), high


@dataclass(frozen=True)
class Plan:
    """What a load settled: the pixel range served, and why vision is off when it is."""

    min_pixels: int
    max_pixels: int
    declared_max: int
    reserved: int  # bytes set aside for encoding one image at max_pixels
    disabled: str | None = None

    def describe(self) -> str:
        if self.disabled:
            return f"disabled: {self.disabled}"
        line = f"max_pixels {self.max_pixels}, min_pixels {self.min_pixels}"
        if self.max_pixels < self.declared_max:
            line += f" (clamped from {self.declared_max} to fit the memory budget)"
        return line


def plan_pixels(settings: VisionSettings, processor, geometry: Geometry, room: int | None) -> Plan:
    """Clamp the declared pixel range to `room` bytes (None: no budget to clamp against)."""
    low, high = checkpoint_pixels(processor)
    low = settings.min_pixels or low
    high = settings.max_pixels or max(high, low)
    if room is None:
        return Plan(low, high, high, geometry.encode_bytes(high))
    fits = min(high, geometry.affordable(room))
    if fits < low:
        need = geometry.encode_bytes(low)
        why = (
            f"encoding an image of min_pixels {low} needs {describe(need)}, but only "
            f"{describe(max(room, 0))} of the memory budget is left after weights and KV cache"
        )
        return Plan(low, high, high, 0, disabled=why)
    return Plan(low, fits, high, geometry.encode_bytes(fits))


def fit_image(image, plan: Plan, low: bool = False):
    """`image` (PIL) resized, aspect kept, to hold between min_pixels and max_pixels
    (`low`: at most min_pixels, OpenAI's `detail: low`)."""
    width, height = image.size
    pixels = width * height
    most = plan.min_pixels if low else plan.max_pixels
    if plan.min_pixels <= pixels <= most:
        return image
    bound = most if pixels > most else plan.min_pixels
    scale = math.sqrt(bound / pixels)
    # Round down when shrinking, up when growing, so the result lands inside the range.
    turn = math.floor if pixels > most else math.ceil
    size = (max(1, turn(width * scale)), max(1, turn(height * scale)))
    from PIL import Image

    return image.resize(size, Image.Resampling.BICUBIC)


def cap_processor(processor, plan: Plan) -> None:
    """Make the checkpoint's own image processor keep to `plan` too.

    Tiled processors (idefics3/SmolVLM) resize every image, small ones up, to `longest_edge`
    before cutting tiles, so that edge squared is what any image costs: it is lowered to the
    largest whole number of tiles within max_pixels. Processors that read `max_pixels` and
    `min_pixels` themselves (Qwen-VL) get the plan's.
    """
    import dataclasses

    image = getattr(processor, "image_processor", None)
    if image is None:
        return
    for name in ("max_pixels", "min_pixels"):
        if getattr(image, name, None):
            setattr(image, name, getattr(plan, name))
    size = getattr(image, "size", None)
    edge = _as_dict(size).get("longest_edge")
    if not edge:
        return
    tile = _edge(getattr(image, "max_image_size", None)) or 1
    cap = max(tile, math.isqrt(plan.max_pixels) // tile * tile)
    if cap >= edge:
        return
    if dataclasses.is_dataclass(size):
        image.size = dataclasses.replace(size, longest_edge=cap)
    else:
        image.size = {**size, "longest_edge": cap}


def _edge(size) -> int | None:
    size = _as_dict(size)
    edge = size.get("longest_edge") or size.get("height")
    return int(edge) if edge else None


def _as_dict(size) -> dict:
    if isinstance(size, dict):
        return size
    if isinstance(size, int):
        return {"height": size, "width": size}
    return dict(getattr(size, "__dict__", {}) or {})
