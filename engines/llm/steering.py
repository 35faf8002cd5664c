"""Steering vectors on one loaded text model (`steering:`), each row of a batch under its own.

After each steered decoder layer the residual stream becomes `h + scale * v[layer]`, for
every token of the row (llama.cpp's control vectors: `direction.<layer>` added to that
layer's output). The vectors are stacked by id: id 0 is the base model's rows (zeros where
the base carries none), id k + 1 the rows of adapter slot k (engines/llm/adapters.py),
which read their slot from the selection the adapters' forward pass made, so two model ids
on one base steer their own rows in one batch. The decoder layers keep their module paths
(adapters find their linear layers by them): their class is extended, not wrapped."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from engines.errors import ModelUnavailable
from engines.sources.steering_files import (
    SteeringError,
    SteeringFile,
    check_fits,
    read_steering,
    resolve,
)
from schemas.config import SteeringConfig
from schemas.events.models import SteeringAnnounced


@dataclass(frozen=True)
class Steered:
    """One model id's vector as read and checked: the layers it steers, at its scale."""

    config: SteeringConfig
    file: SteeringFile
    layers: list[int]

    def announced(self) -> SteeringAnnounced:
        return SteeringAnnounced(
            file=str(self.file.path),
            sha256=self.file.sha256,
            layers=self.layers,
            scale=self.config.scale,
            format=self.file.format,
        )


def model_shape(model_id: str, model) -> tuple[int, int]:
    """The model's hidden size and number of decoder layers (mlx-lm's `args.hidden_size`
    and `layers`); `ModelUnavailable` where the architecture says neither."""
    hidden = getattr(getattr(model, "args", None), "hidden_size", None)
    layers = getattr(model, "layers", None)
    if not isinstance(hidden, int) or layers is None:
        raise ModelUnavailable(
            f"model {model_id!r}: `steering` needs mlx-lm's hidden_size and decoder layers, "
            "which this architecture does not expose: remove `steering`"
        )
    return hidden, len(layers)


def read_steered(
    who: str, config: SteeringConfig, base_dir: Path | None, shape: tuple[int, int]
) -> Steered:
    """`config`'s file read and checked against the model (`shape`: hidden size, decoder
    layers); `ModelUnavailable` naming `who` and `steering` otherwise."""
    try:
        found = read_steering(resolve(config.vector, base_dir))
        layers = found.chosen(config.layers)
        check_fits(found, layers, *shape)
    except SteeringError as error:
        raise ModelUnavailable(f"{who}: `steering`: {error}") from None
    return Steered(config, found, layers)


class LayerSteer:
    """What one decoder layer adds to its output: a vector per id, chosen per row. A plain
    attribute of the layer (not an array of it): no parameter, no module path is added."""

    def __init__(self, rows) -> None:
        self.rows = rows  # the adapters' RowAdapters, or None
        self.vectors: mx.array | None = None  # (ids, hidden)
        self.base = False  # whether id 0 (the base's rows) carries a vector

    def add(self, h):
        if isinstance(h, tuple):  # a layer returning more than the hidden states
            return (self.add(h[0]), *h[1:])
        chosen = self.rows.current if self.rows is not None else None
        if chosen is None:  # every row the base's
            return h + self.vectors[0].astype(h.dtype) if self.base else h
        if chosen.uniform is not None:
            return h + self.vectors[chosen.uniform + 1].astype(h.dtype)
        ids = mx.where(chosen.base, 0, chosen.slots + 1)
        return h + self.vectors[ids][:, None, :].astype(h.dtype)


_STEERED_CLASSES: dict[type, type] = {}


def steered_class(cls: type) -> type:
    """`cls` (a decoder layer's class) extended to add its `_steer` to its output: Python
    looks `__call__` up on the class, so the instance's class is swapped for this one."""
    if cls not in _STEERED_CLASSES:

        def __call__(self, *args, **kwargs):
            return self._steer.add(cls.__call__(self, *args, **kwargs))

        _STEERED_CLASSES[cls] = type(
            cls.__name__, (cls,), {"__call__": __call__, "__module__": cls.__module__}
        )
    return _STEERED_CLASSES[cls]


class SteeringSet:
    """The vectors of one loaded model by id (0: the base's rows, k + 1: adapter slot k's).
    Ids only grow while the base stays loaded, as the adapters' slots do; the stacks are
    rebuilt on the model's thread when a slot is added (`add_slots`), between passes."""

    def __init__(self, model_id: str, model) -> None:
        self.model_id = model_id
        self._model = model
        self._decoder = getattr(model, "layers", None)
        self.by_id: list[Steered | None] = [None]
        self.rows = None  # set by the adapters' set, when the model has adapters
        self._steers: dict[int, LayerSteer] = {}

    @property
    def shape(self) -> tuple[int, int]:
        """(hidden size, decoder layers): asked only of a model some vector steers."""
        return model_shape(self.model_id, self._model)

    def set_base(self, steered: Steered | None) -> None:
        self.by_id[0] = steered
        self._build()

    def add_slots(self, steered: list[Steered | None]) -> None:
        self.by_id += steered
        self._build()

    def of_slot(self, slot: int) -> Steered | None:
        return self.by_id[slot + 1] if slot + 1 < len(self.by_id) else None

    @property
    def nbytes(self) -> int:
        return sum(s.vectors.nbytes for s in self._steers.values())

    def _build(self) -> None:
        steered = sorted({layer for s in self.by_id if s is not None for layer in s.layers})
        if not steered:
            return
        hidden, _ = self.shape
        for layer in steered:
            stack = np.zeros((len(self.by_id), hidden), np.float32)
            for i, s in enumerate(self.by_id):
                if s is not None and layer in s.layers:
                    stack[i] = s.config.scale * s.file.vectors[layer]
            steer = self._steers.get(layer)
            if steer is None:
                steer = self._steers[layer] = LayerSteer(self.rows)
                module = self._decoder[layer]
                module._steer = steer
                module.__class__ = steered_class(type(module))
            steer.rows = self.rows
            steer.vectors = mx.array(stack)
            steer.base = self.by_id[0] is not None and layer in self.by_id[0].layers
            mx.eval(steer.vectors)

    def announced(self, adapters: dict[str, int] | None = None) -> dict[str, SteeringAnnounced]:
        """Each model id served by this load that steers its rows: the base's, and those of
        `adapters` (id -> slot, the adapters declared now)."""
        out = {}
        if self.by_id[0] is not None:
            out[self.model_id] = self.by_id[0].announced()
        for adapter_id, slot in (adapters or {}).items():
            if (s := self.of_slot(slot)) is not None:
                out[adapter_id] = s.announced()
        return out
