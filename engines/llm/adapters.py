"""LoRA and DoRA adapters on one loaded text model, each row of a batch under its own.

Every linear layer some adapter adapts becomes a `MultiLoRALinear`: the base layer, and
every adapter's low-rank matrices stacked (ranks padded with zeros to the largest). Each
forward pass reads which adapter each row of the batch runs under from the cache it is
handed: layer 0's KV cache carries a tag (`AdapterKVCache.adapter`, and the batched cache's
`rows`) that mlx-lm's merges, filters, extensions and extractions keep in step with the
rows, so a row never applies another row's adapter, whichever of mlx-lm's batches
(prefill, decode, the single-sequence loop) runs it. Per row the layer computes

    y = W x + scale_i * (x A_i) B_i        (DoRA: times m_i / |W + scale_i B_i A_i|, per output)

and a row of the base adds nothing. The matrices are gathered per row, so one step decodes
rows of different adapters together."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache, KVCache, make_prompt_cache

from engines.errors import ModelUnavailable, SourceError
from engines.llm.steering import Steered, SteeringSet, read_steered
from engines.sources.adapter_files import AdapterError, AdapterFiles, check_fits, read_adapter
from engines.sources.adapter_hub import adapter_dir
from engines.sources.hub import is_hub_source
from schemas.config import AdapterConfig


class AdapterKVCache(KVCache):
    """Layer 0's cache of one sequence, tagged with the adapter it runs under: (slot,
    scale or None for the slot's own), or None for the base."""

    adapter: int | None = None

    @classmethod
    def merge(cls, caches):
        batch = BatchKVCache.merge(caches)
        batch.__class__ = AdapterBatchKVCache
        batch.rows = [getattr(c, "adapter", None) for c in caches]
        return batch


class AdapterBatchKVCache(BatchKVCache):
    """Layer 0's cache of a batch: `rows` is each row's tag, kept in row order."""

    rows: list = []

    def filter(self, batch_indices):
        super().filter(batch_indices)
        kept = batch_indices.tolist() if hasattr(batch_indices, "tolist") else batch_indices
        self.rows = [self.rows[i] for i in kept]

    def extend(self, other):
        super().extend(other)
        self.rows = list(self.rows) + list(getattr(other, "rows", [None] * other.offset.shape[0]))

    def extract(self, idx):
        cache = super().extract(idx)
        cache.__class__ = AdapterKVCache
        cache.adapter = self.rows[idx]
        return cache


def tag(cache: list, slot: int | None, scale: float | None = None) -> list:
    """`cache` (a sequence's, one per layer) made to say it runs under `slot` (None: the
    base) at `scale` (None: the slot's own; a request's `lora` may set another), whether
    it is new, parked or read from the disk tier."""
    first = cache[0]
    if not isinstance(first, KVCache) or isinstance(first, BatchKVCache):
        raise TypeError(f"an adapter's row needs a KVCache at layer 0, not {type(first)}")
    first.__class__ = AdapterKVCache
    first.adapter = None if slot is None else (slot, scale)
    return cache


@dataclass
class Selection:
    """What the forward pass being built applies: per row the slot and scale (base rows:
    slot 0 at scale 0), and whether each row is the base's (for DoRA's factor)."""

    slots: mx.array
    scales: mx.array
    base: mx.array
    uniform: int | None  # the one slot every row runs under, if they all do
    uniform_scale: float = 0.0  # ...and the one scale


@dataclass
class RowAdapters:
    """The scales of the adapters by slot, and the selection of the pass being built."""

    scales: list[float]
    current: Selection | None = None

    def select(self, cache, rows: int) -> None:
        first = cache[0] if cache else None
        tags = getattr(first, "rows", None)
        if tags is None:
            tags = [getattr(first, "adapter", None)] * rows
        if len(tags) != rows or all(t is None for t in tags):
            self.current = None
            return
        scales = [0.0 if t is None else self.scales[t[0]] if t[1] is None else t[1] for t in tags]
        same = tags[0] is not None and all(t == tags[0] for t in tags)
        self.current = Selection(
            mx.array([0 if t is None else t[0] for t in tags]),
            mx.array(scales),
            mx.array([t is None for t in tags]),
            tags[0][0] if same else None,
            scales[0],
        )


class MultiLoRALinear(nn.Module):
    """A base linear layer and every adapter's low-rank update of it, by slot."""

    def __init__(self, base, rows: RowAdapters, a, b, factor=None) -> None:
        super().__init__()
        self.base = base
        self.rows = rows
        self.lora_a = a  # (slots, in, rank)
        self.lora_b = b  # (slots, rank, out)
        if factor is not None:
            self.dora = factor  # (slots, out): m / |W + scale B A| (ones for LoRA's slots)
        self.freeze()

    def __call__(self, x):
        y = self.base(x)
        chosen = self.rows.current
        if chosen is None:
            return y
        if chosen.uniform is not None:
            k = chosen.uniform
            z = (x @ self.lora_a[k]) @ self.lora_b[k]
            z = z * chosen.uniform_scale
        else:
            z = (x @ self.lora_a[chosen.slots]) @ self.lora_b[chosen.slots]
            z = z * chosen.scales.reshape(-1, *([1] * (z.ndim - 1)))
        out = y + z.astype(y.dtype)
        if "dora" not in self:
            return out
        bias = self.base.get("bias") if hasattr(self.base, "get") else None
        factor = mx.where(chosen.base[:, None], 1.0, self.dora[chosen.slots])
        factor = factor.reshape(factor.shape[0], *([1] * (out.ndim - 2)), factor.shape[-1])
        if bias is None:
            return out * factor.astype(out.dtype)
        return (out - bias) * factor.astype(out.dtype) + bias


class AdapterSet:
    """The adapters attached to one loaded model, by slot, and what they hold.

    Slots only grow while the base stays loaded: a reload that adds or changes an adapter
    appends its slot (`stage`, then `apply_staged` on the model's thread, between two
    forward passes); one that removes an adapter only stops routing to it (`current`), so a
    row already decoding under it (its slot on its cache's tag) finishes as it began. A
    removed adapter's matrices stay held until the base loads again."""

    def __init__(
        self, model_id: str, model, base_dir: Path | None, steering: SteeringSet | None = None
    ) -> None:
        self.model_id = model_id
        self._model = model
        self._base_dir = base_dir
        self.shapes = linear_shapes(model)  # the base's own layers, before any is wrapped
        self.slots: list[tuple[AdapterConfig, AdapterFiles]] = []
        self.current: dict[str, int] = {}  # the adapters declared now -> their slot
        self.known: dict[str, int] = {}  # every id ever attached -> its latest slot
        self.rows = RowAdapters([])
        self.layers: dict[str, MultiLoRALinear] = {}
        self.nbytes = 0  # the stacked matrices' bytes, as held
        self._staged: tuple[list[AdapterConfig], list, list[Steered | None]] | None = None
        self._lock = threading.Lock()
        # The model's steering vectors, each slot's (its adapter's `steering`) among them.
        self.steering = steering
        self.token = None  # the base's `hf_token`, for `hf:` adapters

    @property
    def ids(self) -> list[str]:
        return list(self.current)

    def slot(self, adapter_id: str | None) -> int | None:
        """The slot a request for `adapter_id` runs under: an adapter removed by a reload
        still resolves for the requests admitted before it (the routes send no new ones)."""
        return None if adapter_id is None else self.known[adapter_id]

    def make_cache(self, model, slot: int | None) -> list:
        return tag(make_prompt_cache(model), slot)

    def scale_of(self, adapter_id: str, asked: float | None) -> float | None:
        """The scale a request's row runs at: its own (`lora`'s), or None for the slot's.
        A DoRA adapter's magnitudes are normalized at its declared scale: it takes no other."""
        if asked is None:
            return None
        config, files = self.slots[self.known[adapter_id]]
        if files.kind == "dora" and asked != config.scale:
            raise ValueError(
                f"adapter {adapter_id!r} is DoRA: it runs at its declared scale {config.scale} only"
            )
        return asked * files.scale

    def describe(self) -> str:
        return ", ".join(
            f"{config.id} ({files.format} {files.kind}, rank {files.rank}, "
            f"{len(files.modules)} layers{', steered' if config.steering else ''})"
            for config, files in (self.slots[i] for i in self.current.values())
        )

    def stage(self, adapters: list[AdapterConfig]) -> None:
        """The adapters a reload declares, read and checked against the base here (any
        thread; `ModelUnavailable` naming the adapter, the set unchanged); the model's
        thread applies them before its next forward pass."""
        files = read_all(self.model_id, adapters, self._base_dir, self.shapes, self.token)
        steered = [
            None
            if a.steering is None
            else read_steered(
                f"model {self.model_id!r}: adapter {a.id!r}",
                a.steering,
                self._base_dir,
                self.steering.shape,
            )
            for a in adapters
        ]
        with self._lock:
            self._staged = (list(adapters), files, steered)

    def apply_staged(self) -> None:
        """On the model's thread: the staged adapters in force (a new slot for each new or
        changed one), if a reload staged any."""
        with self._lock:
            staged, self._staged = self._staged, None
        if staged is None:
            return
        adapters, files, steered = staged
        fresh, fresh_steered = [], []
        current = {}
        for config, found, steer in zip(adapters, files, steered, strict=True):
            slot = self.current.get(config.id)
            if slot is not None and self.slots[slot][0] == config:
                current[config.id] = slot  # unchanged: its slot serves on
            else:
                current[config.id] = len(self.slots) + len(fresh)
                fresh.append((config, found))
                fresh_steered.append(steer)
        self._extend(fresh)
        if fresh:  # each new slot's vector (or none), rows of the slot steered from now
            self.steering.add_slots(fresh_steered)
        self.current = current
        self.known.update(current)

    def _extend(self, fresh: list[tuple[AdapterConfig, AdapterFiles]]) -> None:
        """New slots for `fresh`: every adapted layer's stacks grown by theirs (zeros where
        an adapter leaves a layer alone; every rank padded to the largest)."""
        from mlx.utils import tree_unflatten

        if not fresh:
            return
        scales = [f.scale * c.scale for c, f in fresh]
        tensors = [mx.load(str(f.weights)) for _, f in fresh]
        targets = sorted(set(self.layers) | {m for _, f in fresh for m in f.modules})
        modules = dict(self._model.named_modules())
        old = len(self.slots)
        replaced = []
        for target in targets:
            layer = self.layers.get(target)
            base = layer.base if layer is not None else modules[target]
            inputs, outputs = linear_shapes_of(base)
            a_stack, b_stack, factors = [], [], []
            for (_, f), t, scale in zip(fresh, tensors, scales, strict=True):
                a, b, factor = slot_matrices(base, f.modules.get(target), t, scale)
                a_stack.append(a)
                b_stack.append(b)
                factors.append(factor)
            rank = max([a.shape[1] for a in a_stack] + ([layer.lora_a.shape[2]] if layer else []))
            a = mx.stack([pad_rank(x, rank, 1) for x in a_stack])
            b = mx.stack([pad_rank(x, rank, 0) for x in b_stack])
            dora = any(f is not None for f in factors) or (layer is not None and "dora" in layer)
            factor = None
            if dora:
                ones = mx.ones((outputs,))
                factor = mx.stack([ones if f is None else f for f in factors])
            if layer is None:  # a layer no adapter touched before: the old slots add nothing
                a = mx.concatenate([mx.zeros((old, inputs, rank)), a]) if old else a
                b = mx.concatenate([mx.zeros((old, rank, outputs)), b]) if old else b
                if factor is not None and old:
                    factor = mx.concatenate([mx.ones((old, outputs)), factor])
                layer = MultiLoRALinear(base, self.rows, a, b, factor)
                self.layers[target] = layer
                replaced.append((target, layer))
            else:
                self.nbytes -= layer_bytes(layer)
                layer.lora_a = mx.concatenate([pad_rank(layer.lora_a, rank, 2), a])
                layer.lora_b = mx.concatenate([pad_rank(layer.lora_b, rank, 1), b])
                if factor is not None:
                    before = layer.dora if "dora" in layer else mx.ones((old, outputs))
                    layer.dora = mx.concatenate([before, factor])
            mx.eval(layer.parameters())
            self.nbytes += layer_bytes(layer)
        if replaced:
            self._model.update_modules(tree_unflatten(replaced))
        self.rows.scales = self.rows.scales + scales
        self.slots += fresh


def slot_matrices(base, spec, tensors, scale: float):
    """One adapter's matrices for one layer, as held: a (in, rank), b (rank, out) and
    DoRA's factor m / |W + scale B A| per output (None for LoRA); zeros (rank 1) where
    the adapter leaves the layer alone."""
    inputs, outputs = linear_shapes_of(base)
    if spec is None:
        return mx.zeros((inputs, 1)), mx.zeros((1, outputs)), None
    a, b = tensors[spec.a_name], tensors[spec.b_name]
    if spec.transposed:
        a, b = a.T, b.T
    a, b = a.astype(mx.float32), b.astype(mx.float32)
    if spec.m_name is None:
        return a, b, None
    adapted = dense_weight(base) + (scale * b.T) @ a.T
    return a, b, tensors[spec.m_name].astype(mx.float32) / mx.linalg.norm(adapted, axis=1)


def pad_rank(x, rank: int, axis: int):
    """`x` with its rank axis padded by zeros to `rank`: zero rows add nothing."""
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, rank - x.shape[axis])
    return mx.pad(x, widths) if rank > x.shape[axis] else x


def layer_bytes(layer: MultiLoRALinear) -> int:
    return layer.lora_a.nbytes + layer.lora_b.nbytes + (layer.dora.nbytes if "dora" in layer else 0)


def linear_shapes(model) -> dict[str, tuple[int, int]]:
    """The base model's linear layers by module path: (in, out) each."""
    shapes = {}
    for name, module in model.named_modules():
        if isinstance(module, (nn.QuantizedLinear, nn.Linear)):
            shapes[name] = linear_shapes_of(module)
    return shapes


def read_all(
    model_id: str,
    adapters: list[AdapterConfig],
    base_dir: Path | None,
    shapes,
    token: str | None = None,
):
    """Each adapter's files, checked against the base's layers `shapes` (`ModelUnavailable`
    naming the adapter otherwise)."""
    read = []
    for adapter in adapters:
        path = Path(adapter.path).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            if is_hub_source(adapter.path):  # cached, else downloaded (this thread waits)
                path = adapter_dir(model_id, adapter.path, token)
            files = read_adapter(path)
            check_fits(files, shapes)
        except AdapterError as error:
            raise ModelUnavailable(f"model {model_id!r}: adapter {adapter.id!r}: {error}") from None
        except SourceError as error:
            raise ModelUnavailable(
                f"model {model_id!r}: adapter {adapter.id!r}: {error.path}: {error.reason}"
            ) from None
        read.append(files)
    return read


def attach(
    model_id: str,
    model,
    adapters: list[AdapterConfig],
    base_dir: Path | None,
    steering: SteeringSet | None = None,
    token: str | None = None,
) -> AdapterSet:
    """Every adapter onto `model` (loaded, its weights held): the layers they adapt become
    `MultiLoRALinear`s, and the model's forward pass selects each row's adapter (and so its
    steering vector, where the adapter carries one)."""
    refuse_unbatched(model_id, model)
    steering = SteeringSet(model_id, model) if steering is None else steering
    attached = AdapterSet(model_id, model, base_dir, steering)
    attached.token = token
    steering.rows = attached.rows
    attached.stage(adapters)
    attached.apply_staged()
    select_rows_on_call(model, attached)
    return attached


def linear_shapes_of(module) -> tuple[int, int]:
    if isinstance(module, nn.QuantizedLinear):
        out, packed = module.weight.shape
        return packed * 32 // module.bits, out
    out, inputs = module.weight.shape
    return inputs, out


def dense_weight(module) -> mx.array:
    """A linear layer's weight as floats (out, in): DoRA's norm is of the adapted weight."""
    if isinstance(module, nn.QuantizedLinear):
        return mx.dequantize(
            module.weight, module.scales, module.get("biases"), module.group_size, module.bits
        ).astype(mx.float32)
    return module.weight.astype(mx.float32)


def select_rows_on_call(model, attached: AdapterSet) -> None:
    """The model's forward pass, made to take what a reload staged and read its rows'
    adapters from the cache first: its class is extended (Python looks `__call__` up on
    the class, not the instance)."""
    cls = type(model)
    rows = attached.rows

    def __call__(self, inputs, *args, **kwargs):
        attached.apply_staged()
        cache = kwargs.get("cache", args[0] if args else None)
        rows.select(cache, inputs.shape[0])
        try:
            return cls.__call__(self, inputs, *args, **kwargs)
        finally:
            rows.current = None  # the graph is built: the next pass selects its own

    model.__class__ = type(
        cls.__name__, (cls,), {"__call__": __call__, "__module__": cls.__module__}
    )


def refuse_unbatched(model_id: str, model) -> None:
    """The rows' tags ride on layer 0's KV cache: an architecture whose first cache is
    another kind (a sliding window, a recurrent state) is refused `adapters` at load."""
    first = make_prompt_cache(model)[0]
    if type(first) is not KVCache:
        raise ModelUnavailable(
            f"model {model_id!r}: `adapters` need a plain KV cache at layer 0; this "
            f"architecture keeps {type(first).__name__} there: remove `adapters`"
        )
