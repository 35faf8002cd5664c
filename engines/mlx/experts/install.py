"""Installing the expert cache in a model opened lazily (nothing evaluated yet): every
SwitchGLU/SwitchMLP module (mlx-lm's routed experts) is replaced by a `CachedExperts` whose
stacks are read from the safetensors files by offset, so the experts' lazy arrays are dropped
before the dense weights are evaluated and never read whole."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from engines.mlx.experts.cache import Counts
from engines.mlx.experts.files import ExpertReader, expert_records
from engines.mlx.experts.switch import CachedExperts, ExpertLayer


def switch_modules(model) -> list[tuple[str, object]]:
    """(path, module) of every routed-experts module of `model`: mlx-lm's SwitchGLU and
    SwitchMLP (qwen3_moe, qwen2_moe, mixtral, gpt-oss, deepseek_v2/v3, glm4_moe, ...)."""
    from mlx_lm.models.switch_layers import SwitchGLU, SwitchMLP

    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, SwitchGLU | SwitchMLP)
    ]


@dataclass
class ExpertSet:
    """The model's cached experts: every layer's, their counts, what they weigh."""

    layers: list[ExpertLayer]
    reader: ExpertReader
    policy: str
    counts: Counts = field(default_factory=Counts)

    @property
    def experts(self) -> int:
        """Experts per layer (the largest layer's)."""
        return max(layer.experts for layer in self.layers)

    @property
    def resident(self) -> int:
        """Experts per layer kept resident."""
        return self.layers[0].cache.capacity

    @property
    def expert_bytes(self) -> int:
        """One expert of every layer: what one more resident expert per layer costs."""
        return sum(layer.expert_bytes for layer in self.layers)

    @property
    def disk_bytes(self) -> int:
        """Every expert of every layer, as the files hold them."""
        return sum(layer.expert_bytes * layer.experts for layer in self.layers)

    @property
    def resident_bytes(self) -> int:
        """What the resident experts take at most (the budget's count)."""
        return sum(
            layer.expert_bytes * min(layer.cache.capacity, layer.experts) for layer in self.layers
        )

    def resize(self, resident: int) -> None:
        """Hold `resident` experts per layer, laid out (and read) now."""
        for layer in self.layers:
            layer.hold(resident)

    def close(self) -> None:
        self.reader.close()


def install_experts(model_id: str, model, model_dir: Path, resident: int, policy: str) -> ExpertSet:
    """Replace every routed-experts module of `model` (opened lazily) by its cached variant
    holding `resident` experts per layer. The stacked expert tensors are found by their
    parameter names in the directory's safetensors files."""
    from mlx.utils import tree_flatten

    found = switch_modules(model)
    names = {
        f"{path}.{leaf}" for path, module in found for leaf, _ in tree_flatten(module.parameters())
    }
    records = expert_records(model_id, model_dir, names)
    reader = ExpertReader(model_id)
    counts = Counts()
    layers = []
    swaps = []
    for path, module in found:
        leaves = {leaf: records[f"{path}.{leaf}"] for leaf, _ in tree_flatten(module.parameters())}
        for leaf in leaves:  # drop the lazy stacks: nothing may evaluate them now
            _set_leaf(module, leaf, None)
        layer = ExpertLayer(module, leaves, reader, resident, policy, counts)
        layers.append(layer)
        swaps.append((path, CachedExperts(layer)))
    _replace(model, swaps)
    return ExpertSet(layers, reader, policy, counts)


def _set_leaf(module, path: str, value) -> None:
    owner_path, _, leaf = path.rpartition(".")
    owner = module
    for part in owner_path.split(".") if owner_path else ():
        owner = owner[part]
    owner[leaf] = value


def _replace(model, swaps: list[tuple[str, object]]) -> None:
    """Each module at its dotted path (list items by index) replaced by its stand-in."""
    for path, new in swaps:
        owner_path, _, leaf = path.rpartition(".")
        owner = model
        for part in owner_path.split("."):
            owner = owner[int(part)] if isinstance(owner, list) else getattr(owner, part)
        setattr(owner, leaf, new)
