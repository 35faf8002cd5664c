"""How long two token sequences run alike from their start, and how long a shared prefix must
be to be worth reusing a parked cache for."""

from __future__ import annotations

from collections.abc import Sequence

# A shared prefix is reused only from this many tokens and from half the prompt: below
# that, copying the parked cache costs more than prefilling the tokens again.
REUSE_MIN_TOKENS = 32
# On the CPU a prompt token costs ~5 ms of CPU to prefill (SmolLM2, float32, 2 cores) and
# copying its KV microseconds: a shared system prompt and template header (24-28 tokens of
# SmolLM2's) is worth its copy there. An 8-client burst reusing its 28 shared tokens had the
# lowest TTFT in bench/RESULTS.md (issue 32.5); 753fdee, which reused any shared prefix,
# was the commit of the CPU's 4.76 x batching run.
REUSE_MIN_TOKENS_CPU = 16
# On CUDA a prefill of a few hundred tokens costs a few decode steps, and a batch holding a
# reused cache beside fresh ones decoded slower: on the H200, 64 clients of SmolLM2 whose
# prompts shared ~50 tokens with parked ones took 1.8 s for 128 tokens, against 1.1 s with
# reuse off (bench/RESULTS.md). There, only a long shared prefix is worth its cache.
REUSE_MIN_TOKENS_CUDA = 256


def reuse_min_tokens(device: str) -> int:
    """The shortest shared prefix reused on this platform (`PlatformPath.device`)."""
    if device == "gpu (cuda)":
        return REUSE_MIN_TOKENS_CUDA
    return REUSE_MIN_TOKENS_CPU if device == "cpu" else REUSE_MIN_TOKENS


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
