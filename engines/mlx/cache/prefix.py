"""How long two token sequences run alike from their start."""

from __future__ import annotations

from collections.abc import Sequence


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the common prefix of `a` and `b`."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def parked_prefix(parked, key: str, tokens: Sequence[int]) -> int:
    """The length of the longest prefix of `tokens` that some prompt parked in `parked` (an
    mlx-lm `LRUPromptCache` under `key`) shares: the tokens a reuse could skip.

    `PromptTrie.search` answers this too, but when the prompt leaves the trie part-way it also
    walks every parked prompt below that point, copying a list a node, for the shortest longer
    one: 4.4 ms of the model thread on an H200 host after a 128-stream burst, for a prompt that
    then reuses nothing (bench/RESULTS.md, run 29). This walks only the prompt's own path.
    """
    node = parked._trie._trie.get(key)
    n = 0
    for tok in tokens:
        if node is None or tok not in node:
            break
        node = node[tok]
        n += 1
    return n
