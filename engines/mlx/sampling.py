"""Per-request sampling: a seeded request draws from its own random key.

`mx.random.seed` resets a generator that other requests draw from too (the process's, or
since MLX 0.32 the model thread's): one request's `seed` would fix the "random" samples of
every request after it and of its batch-mates. A seeded request therefore gets a sampler
with its own key, split once per token, and never touches the shared generator; an
unseeded one draws from the shared generator, which nobody resets.

Unseeded requests with the same settings share one sampler object: mlx-lm's batch
generator samples a whole batch in one call when every sequence has the same sampler, and
one call per sequence otherwise (64 slices, draws and a concatenation a step at 64 clients).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

Sampler = Callable[..., object]


def make_request_sampler(
    temperature: float | None,
    top_p: float | None,
    min_p: float | None,
    top_k: int | None,
    seed: int | None,
) -> Sampler:
    """mlx-lm's sampler for these settings; with a seed, one that draws from its own key."""
    temp, top_p, min_p, top_k = temperature or 0.0, top_p or 0.0, min_p or 0.0, top_k or 0
    if seed is None or temp == 0:  # greedy decoding draws nothing
        return shared_sampler(temp, top_p, min_p, top_k)
    return KeyedSampler(temp, top_p, min_p, top_k, seed)


@functools.lru_cache(maxsize=64)  # bounded: settings come from clients
def shared_sampler(temp: float, top_p: float, min_p: float, top_k: int) -> Sampler:
    """One sampler per distinct setting, so a batch of like requests samples in one call."""
    from mlx_lm.sample_utils import make_sampler

    return make_sampler(temp=temp, top_p=top_p, min_p=min_p, top_k=top_k)


def is_greedy(sampler: Sampler) -> bool:
    """Whether `sampler` is the arg-max (temperature 0): it needs no normalized logprobs."""
    return sampler is shared_sampler(0.0, 0.0, 0.0, 0)


class KeyedSampler:
    """Top-p, min-p and top-k as mlx-lm applies them, then a draw from this request's key."""

    def __init__(self, temp: float, top_p: float, min_p: float, top_k: int, seed: int) -> None:
        import mlx.core as mx
        from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

        self._temp = temp
        self._key = mx.random.key(seed)
        # The order of mlx-lm's `make_sampler` chain.
        self._filters: list[Callable] = []
        if 0 < top_p < 1.0:
            self._filters.append(lambda x: apply_top_p(x, top_p))
        if min_p != 0.0:
            self._filters.append(lambda x: apply_min_p(x, min_p, 1))
        if top_k > 0:
            self._filters.append(lambda x: apply_top_k(x, top_k))

    def __call__(self, logprobs):
        import mlx.core as mx

        for keep in self._filters:
            logprobs = keep(logprobs)
        self._key, draw = mx.random.split(self._key)
        return mx.random.categorical(logprobs * (1.0 / self._temp), key=draw)
