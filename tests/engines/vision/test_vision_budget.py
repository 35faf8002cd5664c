"""The pixel budget: checkpoint defaults, clamping to memory, disabling, resizing."""

from __future__ import annotations

from types import SimpleNamespace

from PIL import Image

from engines.vision.budget import Geometry, cap_processor, checkpoint_pixels, fit_image, plan_pixels
from schemas.config import VisionSettings

# The demo checkpoint's tower: 64x64 tiles of 8x8 patches, 4 heads, float32.
DEMO = Geometry(patch=8, tile=64, hidden=64, intermediate=128, heads=4, element=4)


def idefics3(longest_edge: int = 256, tile: int = 64):
    image = SimpleNamespace(
        size={"longest_edge": longest_edge}, max_image_size={"longest_edge": tile}
    )
    return SimpleNamespace(image_processor=image)


def qwen(min_pixels: int, max_pixels: int):
    image = SimpleNamespace(min_pixels=min_pixels, max_pixels=max_pixels, size={})
    return SimpleNamespace(image_processor=image)


def test_defaults_come_from_the_checkpoints_preprocessor_config():
    assert checkpoint_pixels(idefics3()) == (64 * 64, 256 * 256)
    assert checkpoint_pixels(qwen(3136, 12845056)) == (3136, 12845056)


def test_encoding_costs_grow_with_pixels_and_the_largest_affordable_is_found():
    assert DEMO.encode_bytes(64 * 64) < DEMO.encode_bytes(256 * 256)
    room = DEMO.encode_bytes(100_000)
    assert DEMO.encode_bytes(DEMO.affordable(room)) <= room
    assert DEMO.encode_bytes(DEMO.affordable(room) + 64 * 64) > room


def test_no_budget_keeps_the_declared_range():
    plan = plan_pixels(VisionSettings(max_pixels=40_000), idefics3(), DEMO, None)
    assert (plan.min_pixels, plan.max_pixels, plan.disabled) == (4096, 40_000, None)


def test_a_tight_budget_clamps_max_pixels_and_says_so():
    room = DEMO.encode_bytes(7 * 64 * 64)  # 7 tiles plus the global one
    plan = plan_pixels(VisionSettings(), idefics3(), DEMO, room)
    assert plan.disabled is None and plan.max_pixels == 7 * 64 * 64
    assert "clamped from 65536" in plan.describe()
    processor = idefics3()
    cap_processor(processor, plan)  # the processor's own resize keeps to whole tiles
    assert processor.image_processor.size["longest_edge"] == 128


def test_a_budget_below_min_pixels_disables_vision_with_the_reason():
    plan = plan_pixels(VisionSettings(), idefics3(), DEMO, DEMO.encode_bytes(64 * 64) - 1)
    assert plan.disabled and "min_pixels 4096" in plan.disabled
    assert plan.describe().startswith("disabled: ")


def test_images_are_resized_into_the_range_keeping_their_aspect():
    plan = plan_pixels(VisionSettings(min_pixels=100, max_pixels=10_000), idefics3(), DEMO, None)
    big = fit_image(Image.new("RGB", (1000, 500)), plan)
    assert big.size[0] * big.size[1] <= 10_000 and abs(big.size[0] / big.size[1] - 2) < 0.05
    small = fit_image(Image.new("RGB", (5, 5)), plan)
    assert small.size[0] * small.size[1] >= 100
    same = Image.new("RGB", (50, 50))
    assert fit_image(same, plan) is same
    low = fit_image(Image.new("RGB", (1000, 500)), plan, low=True)  # detail: low
    assert low.size[0] * low.size[1] <= 100
