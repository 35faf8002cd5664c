"""Whisper's tokenizer from `tokenizer.json` alone, in the shape mlx-audio's Whisper reads
(the part of transformers' WhisperTokenizer it calls), so no transformers processor (and
no preprocessor_config.json) is needed.

Checkpoints whose tokenizer.json lists no timestamp tokens (CTranslate2's) still decode
timestamps: they follow `<|notimestamps|>`, 0.02 s apart, as in every Whisper vocabulary.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer


class WhisperTextTokenizer:
    """encode/decode and special-token lookups over a `tokenizers.Tokenizer`."""

    def __init__(self, path: Path) -> None:
        self._tok = Tokenizer.from_file(str(path))
        self._tok.no_padding()
        self._tok.no_truncation()
        self._vocab = self._tok.get_vocab(with_added_tokens=True)
        self.eos_token_id = self._vocab["<|endoftext|>"]
        self.unk_token_id = self.eos_token_id  # GPT-2's vocabulary has no unknown token
        first = self._vocab.get("<|0.00|>")
        if first is None:
            first = self._vocab["<|notimestamps|>"] + 1
        self.timestamp_begin = first

    def get_vocab(self) -> dict[str, int]:
        return self._vocab

    def convert_tokens_to_ids(self, token: str) -> int:
        if token == "<|0.00|>":
            return self.timestamp_begin
        return self._vocab.get(token, self.unk_token_id)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        ids = [i for i in ids if i < self.timestamp_begin]
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)


class WhisperProcessorShim:
    """What mlx-audio's Whisper keeps as `_processor`: only `.tokenizer` is read."""

    def __init__(self, tokenizer: WhisperTextTokenizer) -> None:
        self.tokenizer = tokenizer
