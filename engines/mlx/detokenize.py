"""A byte-level BPE model's streaming detokenizer, its per-token work done once a vocabulary.

mlx-lm's `BPEStreamingDetokenizer` maps each character of each token back to its byte and
re-joins the whole text so far on every token: ~4.5 µs a token on the 2-core CPU, paid for
each of a batch's sequences every step on the model thread, where raw `BatchGenerator` pays
nothing (bench/token_cost.py). `ByteDetokenizer` reads each token's bytes, and its text when
the token is whole by itself, from a table made when the model loads, and keeps the text in
pieces. Its rules are mlx-lm's: the bytes are held while they end inside a UTF-8 character,
a lone space is held until the next token, and the text's first space is dropped.
"""

from __future__ import annotations

# mlx-lm's used token of an id past its vocabulary (a padded embedding).
PAST_VOCABULARY = "!"


def byte_detokenizer(prototype):
    """A `ByteDetokenizer` with `prototype`'s vocabulary (a tokenizer's `detokenizer`) when
    it is mlx-lm's BPE one, else None (that one, or mlx-lm's others, serve as they are)."""
    try:
        from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, _byte_decoder
    except ImportError:  # a private helper of mlx-lm moved: its own detokenizer serves
        return None
    if type(prototype) is not BPEStreamingDetokenizer:
        return None
    return ByteDetokenizer(ByteTable(prototype.tokenmap, _byte_decoder()))


class ByteTable:
    """Per token id: its bytes, its text where the token alone is whole (else None), and
    whether it is a lone space (mlx-lm holds those until the next token)."""

    def __init__(self, tokenmap: list[str], byte_of: dict[str, int]) -> None:
        self.bytes = [_token_bytes(t, byte_of) for t in tokenmap]
        self.lone_space = [len(t) == 1 and byte_of.get(t) == 32 for t in tokenmap]
        self.whole = [
            None if space else _whole_text(b)
            for b, space in zip(self.bytes, self.lone_space, strict=True)
        ]
        self.size = len(tokenmap)


def _token_bytes(token: str, byte_of: dict[str, int]) -> bytes:
    # As mlx-lm decodes them: a character outside the byte map stands for its UTF-8 bytes
    # (an added token's), and so does the one that maps to byte 0.
    out = bytearray()
    for c in token:
        b = byte_of.get(c, False)
        if b:
            out.append(b)
        else:
            out.extend(c.encode("utf-8"))
    return bytes(out)


def _whole_text(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:  # a piece of a character, or bytes that never make one
        return None
    return None if text.endswith("\ufffd") else text


class ByteDetokenizer:
    """mlx-lm's streaming detokenizer interface: `add_token`, `finalize`, `last_segment`,
    `text`, `tokens`, `reset`; one per sequence, from `fresh()`."""

    def __init__(self, table: ByteTable) -> None:
        self._table = table
        self.reset()

    def fresh(self) -> ByteDetokenizer:
        return ByteDetokenizer(self._table)

    def reset(self) -> None:
        self.tokens: list[int] = []
        self._held = b""  # bytes not yet text: a character's start, or a lone space
        self._pieces: list[str] = []
        self._seen = 0  # pieces already handed out by `last_segment`

    def add_token(self, token: int) -> None:
        self.tokens.append(token)
        table = self._table
        if token >= table.size:
            data, whole, space = PAST_VOCABULARY.encode(), PAST_VOCABULARY, False
        else:
            data, whole, space = table.bytes[token], table.whole[token], table.lone_space[token]
        if whole is not None and not self._held:  # most tokens
            self._put(whole)
            return
        self._held += data
        text = self._held.decode("utf-8", "replace")
        if not text.endswith("\ufffd") and not space:
            self._held = b""
            self._put(text)

    def finalize(self) -> None:
        if self._held:
            text, self._held = self._held.decode("utf-8", "replace"), b""
            self._put(text)

    def _put(self, text: str) -> None:
        if not self._pieces and text[:1] == " ":  # the text's first space is the tokenizer's
            text = text[1:]
        if text:
            self._pieces.append(text)

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    @property
    def last_segment(self) -> str:
        """The text added since the last time this was read."""
        pieces, seen = self._pieces, self._seen
        if seen == len(pieces):
            return ""
        self._seen = len(pieces)
        return pieces[seen] if seen + 1 == len(pieces) else "".join(pieces[seen:])
