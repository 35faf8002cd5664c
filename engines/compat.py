"""The one engine-side reading of `MODEL_KEYS`' `tasks`: a key refused a task found at load.

The config's check refuses a key where `task:` declares a task it does not apply to; a
vision checkpoint (a vision tower) and an embedding architecture are found only when the
engine loads, so the vision and embedding engines ask here then, rather than serve the model
without what it asked for.
"""

from __future__ import annotations

import msgspec

from engines.errors import ModelUnavailable
from schemas.config import ModelConfig
from schemas.config_keys import MODEL_KEYS, TASKS

# A list key's default (`adapters: []`) is a default_factory, not a default.
_UNSET = {
    f.name: f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
    for f in msgspec.structs.fields(ModelConfig)
    if f.default is not msgspec.NODEFAULT or f.default_factory is not msgspec.NODEFAULT
}


def refuse_off_task(model: ModelConfig, task: str) -> None:
    """Raise `ModelUnavailable` naming the first key `model` sets that `task` (one of
    `TASKS`) does not take, by the table; nothing when it sets none."""
    for key, rule in MODEL_KEYS.items():
        value = getattr(model, key)
        if task in rule.tasks or value is None or value == _UNSET.get(key):
            continue
        shown = f"{key}: {value}" if isinstance(value, str) else key
        # "an MLX text model" -> "MLX text models"
        kinds = " or ".join(TASKS[t].split(" ", 1)[1] + "s" for t in sorted(rule.tasks))
        raise ModelUnavailable(
            f"model {model.id!r} is {TASKS[task]}: `{shown}` applies to {kinds} only; remove "
            "it from this model"
        )
