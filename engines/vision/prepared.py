"""What one generation of the vision engine starts from: a request as the model takes it
(`Inputs`) and what the engine prepares from it (`Prepared`), read by both decoding paths."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from engines.text.output import OutputParser


class Inputs(NamedTuple):
    """A request as the model takes it: token ids, the processor's tensors, cache keys."""

    ids: list[int]
    tensors: dict  # input_ids, pixel_values, attention_mask and model-specific extras
    keys: list[int]
    images: int
    image_tokens: int


class Prepared(NamedTuple):
    """What one generation needs: inputs, sampler, output parser and token budget."""

    inputs: Inputs
    sampler: Callable
    parser: OutputParser
    max_tokens: int
