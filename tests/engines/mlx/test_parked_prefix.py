"""The parked prefix a prompt could reuse, found by walking only the prompt's own path."""

from __future__ import annotations

import random

from mlx_lm.models.cache import LRUPromptCache

from engines.mlx.cache.prefix import parked_prefix


def searched(parked: LRUPromptCache, key: str, tokens: list[int]) -> int:
    """What mlx-lm's own trie search says is shared (its walk below the prompt included)."""
    found = parked._trie.search(key, tokens)
    return max(found.common_prefix, len(found.exact or found.shorter or ()))


def test_it_agrees_with_mlx_lms_trie_search_on_every_kind_of_prompt():
    rng = random.Random(7)
    parked = LRUPromptCache(max_size=64)
    stem = [rng.randrange(50) for _ in range(12)]  # a chat template's shared start
    prompts = [stem + [rng.randrange(50) for _ in range(rng.randrange(0, 30))] for _ in range(40)]
    for tokens in prompts:
        parked.insert_cache("model", tokens, [])
    assert parked_prefix(parked, "other", stem) == searched(parked, "other", stem) == 0
    cases = [*prompts]  # exact hits
    cases += [p[: rng.randrange(len(p) + 1)] for p in prompts]  # ending inside a parked prompt
    # a parked prompt, then more
    cases += [p + [rng.randrange(50) for _ in range(5)] for p in prompts]
    cases += [stem[:5] + [99] + p[6:] for p in prompts]  # leaving the trie early
    cases += [[99, *p] for p in prompts]  # sharing nothing
    for tokens in cases:
        assert parked_prefix(parked, "model", tokens) == searched(parked, "model", tokens), tokens
    assert {parked_prefix(parked, "model", t) for t in cases} > {0, 5, len(stem)}


def test_an_empty_cache_shares_nothing():
    assert parked_prefix(LRUPromptCache(max_size=4), "model", [1, 2, 3]) == 0
