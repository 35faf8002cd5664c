"""A short text a constraint plan accepts, found by walking its grammar byte by byte.

The scripted engine answers a constrained request whose scripted reply does not fit with
this instance (a weightless model has no logits to mask). The walk needs a tokenizer of
one token per byte. At each step it takes, among the bytes the grammar allows: one after
which the text is complete; else a closer (`"`, `]`, `}`: strings, arrays and objects end
as soon as they may); else a comma that moves on (the next item a schema asks for); else a
printable byte that does not leave the next step as it is (one more digit) and whose next
step is the most constrained (a literal's next letter over one more free letter: `@` in
`[a-z]+@x`); white space or an escape only where nothing else may come. The text is short
(`{}`, `""`, `0`, required keys only), not always the shortest.
"""

from __future__ import annotations

from engines.text.constrain import Plan
from engines.text.grammars import load_llguidance

CLOSERS = b'"]}'
COMMA = ord(",")
ALNUM = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
PRINTABLE = ALNUM + bytes(b for b in range(0x21, 0x7F) if b not in ALNUM + b",\\")
LAST = b" \t\r\n\\"  # white space and escapes: only where nothing else may come
FREE_TEXT = 64  # more bytes allowed than this: inside a string, not between JSON's tokens
LIMIT = 4096  # bytes: past this the grammar is taken to have no short instance


def shortest_instance(plan: Plan, tokenizer, limit: int = LIMIT) -> str | None:
    """A text `plan` accepts, or None when the walk finds none within `limit` bytes.
    `tokenizer` is llguidance's, one token per byte; a plan that lets text be free (strict
    tools under `auto`) accepts the empty text."""
    if plan.trigger is not None:
        return ""
    llg = load_llguidance()
    matcher = llg.LLMatcher(tokenizer, plan.grammar, log_level=0)
    token_of = {b: tokenizer.tokenize_bytes(bytes([b]))[0] for b in range(256)}
    text = bytearray()
    while not matcher.is_accepting():
        allowed = _allowed(matcher, token_of)
        if not allowed or len(text) >= limit or matcher.is_error():
            return None
        chosen = _choose(matcher, allowed, token_of)
        matcher.consume_token(token_of[chosen])
        text.append(chosen)
    try:
        return text.decode()
    except UnicodeDecodeError:
        return None


def _allowed(matcher, token_of: dict[int, int]) -> list[int]:
    mask = int.from_bytes(matcher.compute_bitmask(), "little")
    return [b for b, token in token_of.items() if mask >> token & 1]


def _choose(matcher, allowed: list[int], token_of: dict[int, int]) -> int:
    def follow(b: int) -> list[int]:  # the bytes that may come after b; [] where it may end
        after = matcher.deep_copy()
        after.consume_token(token_of[b])
        return [] if after.is_accepting() else _allowed(after, token_of)

    def loops(b: int) -> bool:  # the same bytes may come after it as now: one more digit
        return follow(b) == allowed

    closers = {b: len(follow(b)) for b in CLOSERS if b in allowed}
    # Inside free text (a string) `]` and `}` are letters: a closer counts there only
    # where it narrows what may come (the string's closing quote).
    free = len(allowed) > FREE_TEXT
    closing = {b: width for b, width in closers.items() if not free or width < len(allowed)}
    if closing:
        return min(closing, key=closing.__getitem__)
    if COMMA in allowed and not free and not loops(COMMA):  # the next item a schema asks for
        return COMMA
    printable = [b for b in PRINTABLE if b in allowed]
    moving = {b: len(follow(b)) for b in printable if not loops(b)}
    if moving:
        return min(moving, key=moving.__getitem__)  # the first of the narrowest
    for b in [*printable, COMMA, *LAST]:
        if b in allowed:
            return b
    return allowed[0]  # only bytes past ASCII may come: the grammar's own (UTF-8)
