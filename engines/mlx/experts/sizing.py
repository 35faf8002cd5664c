"""`experts.resident`: a number of experts per layer (at most the layer's), or `auto`: as many
as the memory budget leaves once the dense weights and the KV caches of the window are
counted, the window being `context.max` or, under `context: auto`, the trained one. Refused
with the numbers when not even one expert per layer fits."""

from __future__ import annotations

from engines.errors import ContextTooLarge
from engines.units import describe


def size_resident(
    model_id: str,
    wanted: int | str,
    experts: int,
    expert_bytes: int,
    dense: int,
    kv_bytes: int,
    memory_left: int | None,
) -> int:
    """Experts per layer to keep resident. `expert_bytes`: one expert of every layer;
    `kv_bytes`: the KV caches the window needs beside them."""
    if wanted != "auto":
        return min(int(wanted), experts)
    if memory_left is None:
        return experts
    room = memory_left - dense - kv_bytes
    fits = max(0, room) // expert_bytes
    if fits < 1:
        raise ContextTooLarge(
            model_id,
            "experts.resident: auto",
            f"not one expert per layer fits: one takes {describe(expert_bytes)} across the "
            f"layers, the dense weights take {describe(dense)}, the KV caches of the window "
            f"{describe(kv_bytes)}, and the memory budget leaves {describe(memory_left)}",
        )
    return min(experts, int(fits))
