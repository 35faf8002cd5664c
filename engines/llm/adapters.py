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

from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import BatchKVCache, KVCache, make_prompt_cache

from engines.errors import ModelUnavailable
from engines.sources.adapter_files import AdapterError, AdapterFiles, check_fits, read_adapter
from schemas.config import AdapterConfig


class AdapterKVCache(KVCache):
    """Layer 0's cache of one sequence, tagged with the adapter slot it runs under."""

    adapter: int | None = None

    @classmethod
    def merge(cls, caches):
        batch = BatchKVCache.merge(caches)
        batch.__class__ = AdapterBatchKVCache
        batch.rows = [getattr(c, "adapter", None) for c in caches]
        return batch


class AdapterBatchKVCache(BatchKVCache):
    """Layer 0's cache of a batch: `rows` is each row's adapter slot, kept in row order."""

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


def tag(cache: list, slot: int | None) -> list:
    """`cache` (a sequence's, one per layer) made to say it runs under `slot` (None: the
    base), whether it is new, parked or read from the disk tier."""
    first = cache[0]
    if not isinstance(first, KVCache) or isinstance(first, BatchKVCache):
        raise TypeError(f"an adapter's row needs a KVCache at layer 0, not {type(first)}")
    first.__class__ = AdapterKVCache
    first.adapter = slot
    return cache


@dataclass
class Selection:
    """What the forward pass being built applies: per row the slot and scale (base rows:
    slot 0 at scale 0), and whether each row is the base's (for DoRA's factor)."""

    slots: mx.array
    scales: mx.array
    base: mx.array
    uniform: int | None  # the one slot every row runs under, if they all do


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
        uniform = tags[0] if all(t == tags[0] for t in tags) else None
        self.current = Selection(
            mx.array([0 if t is None else t for t in tags]),
            mx.array([0.0 if t is None else self.scales[t] for t in tags]),
            mx.array([t is None for t in tags]),
            uniform,
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
            z = z * self.rows.scales[k]
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


@dataclass
class AdapterSet:
    """The adapters attached to a model, by slot, and what they hold."""

    ids: list[str]
    files: list[AdapterFiles]
    rows: RowAdapters
    nbytes: int  # the stacked matrices' bytes, as held
    own_bytes: list[int] = field(default_factory=list)  # each adapter's own tensors

    def slot(self, adapter_id: str | None) -> int | None:
        return None if adapter_id is None else self.ids.index(adapter_id)

    def make_cache(self, model, slot: int | None) -> list:
        return tag(make_prompt_cache(model), slot)


def linear_shapes(model) -> dict[str, tuple[int, int]]:
    """The base model's linear layers by module path: (in, out) each."""
    shapes = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.QuantizedLinear):
            out, packed = module.weight.shape
            shapes[name] = (packed * 32 // module.bits, out)
        elif isinstance(module, nn.Linear):
            out, inputs = module.weight.shape
            shapes[name] = (inputs, out)
    return shapes


def read_all(model_id: str, adapters: list[AdapterConfig], base_dir: Path | None, model):
    """Each adapter's files, checked against the loaded base (`ModelUnavailable` naming the
    adapter otherwise)."""
    shapes = linear_shapes(model)
    read = []
    for adapter in adapters:
        path = Path(adapter.path).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            files = read_adapter(path)
            check_fits(files, shapes)
        except AdapterError as error:
            raise ModelUnavailable(f"model {model_id!r}: adapter {adapter.id!r}: {error}") from None
        read.append(files)
    return read


def attach(
    model_id: str, model, adapters: list[AdapterConfig], base_dir: Path | None
) -> AdapterSet:
    """Every adapter onto `model` (loaded, its weights held): the layers they adapt become
    `MultiLoRALinear`s, and the model's forward pass selects each row's adapter."""
    from mlx.utils import tree_unflatten

    refuse_unbatched(model_id, model)
    files = read_all(model_id, adapters, base_dir, model)
    rows = RowAdapters([f.scale * a.scale for f, a in zip(files, adapters, strict=True)])
    tensors = [mx.load(str(f.weights)) for f in files]
    modules = dict(model.named_modules())
    targets = sorted({m for f in files for m in f.modules})
    rank = max(f.rank for f in files)
    replaced, nbytes = [], 0
    for target in targets:
        base = modules[target]
        a_stack, b_stack, factors, dora = [], [], [], False
        inputs, outputs = linear_shapes_of(base)
        for f, t, scale in zip(files, tensors, rows.scales, strict=True):
            spec = f.modules.get(target)
            if spec is None:
                a = mx.zeros((inputs, rank))
                b = mx.zeros((rank, outputs))
            else:
                a, b = t[spec.a_name], t[spec.b_name]
                if spec.transposed:
                    a, b = a.T, b.T
                a = mx.pad(a.astype(mx.float32), [(0, 0), (0, rank - spec.rank)])
                b = mx.pad(b.astype(mx.float32), [(0, rank - spec.rank), (0, 0)])
            factor = mx.ones((outputs,))
            if spec is not None and spec.m_name is not None:
                dora = True
                weight = dense_weight(base)
                adapted = weight + (scale * b.T) @ a.T
                factor = t[spec.m_name].astype(mx.float32) / mx.linalg.norm(adapted, axis=1)
            a_stack.append(a)
            b_stack.append(b)
            factors.append(factor)
        a, b = mx.stack(a_stack), mx.stack(b_stack)
        factor = mx.stack(factors) if dora else None
        mx.eval(a, b, *([factor] if factor is not None else []))
        nbytes += a.nbytes + b.nbytes + (factor.nbytes if factor is not None else 0)
        replaced.append((target, MultiLoRALinear(base, rows, a, b, factor)))
    model.update_modules(tree_unflatten(replaced))
    select_rows_on_call(model, rows)
    return AdapterSet([a.id for a in adapters], files, rows, nbytes, [f.nbytes for f in files])


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


def select_rows_on_call(model, rows: RowAdapters) -> None:
    """The model's forward pass, made to read its rows' adapters from the cache first: its
    class is extended (Python looks `__call__` up on the class, not the instance)."""
    cls = type(model)

    def __call__(self, inputs, *args, **kwargs):
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
