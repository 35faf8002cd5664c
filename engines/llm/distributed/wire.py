"""Rank 0's word to every rank, over the model's own collectives, and the proof each rank
gives before the group carries any of it.

Before each step rank 0 shares what changed (requests admitted, cancellations, a load, the
stop), so every rank applies the same changes in the same order and steps the same batch.
Every rank calls `Channel.share` at the same point of its loop. A message is sent as two
`all_sum`s where only rank 0 contributes: its length, then its bytes.

The ring's listeners are open to anyone who can reach their port while the group forms, and
MLX's backend takes the first connection it is offered. So nothing crosses the ring before
every rank has proved it holds the launch's key (`authenticate`: an HMAC challenge-response
over the ring itself); the changes are msgspec messages of known shapes, never pickles, so
their bytes cannot run code; and each carries an HMAC of the key over its step number, so one
that is not rank 0's, or is replayed, stops the rank instead of being applied.
"""

from __future__ import annotations

import hashlib
import hmac
import os

import mlx.core as mx
import msgspec

from schemas.canonical import ChatRequest

KEY_BYTES = 32
TAG_BYTES = 32  # HMAC-SHA256
NONCE_BYTES = 16


class RingRefused(Exception):
    """The ring did not form between the launch's ranks: a rank failed MLX's start or the
    key's proof (a stranger took a rank's connection, or a peer died). Started again."""


class Load(msgspec.Struct, tag="load", array_like=True):
    memory_left: int | None


class Open(msgspec.Struct, tag="open", array_like=True):
    pass


class Stop(msgspec.Struct, tag="stop", array_like=True):
    pass


class Cancel(msgspec.Struct, tag="cancel", array_like=True):
    ids: list[int]


class Add(msgspec.Struct, tag="add", array_like=True):
    ids: list[int]


class Prepare(msgspec.Struct, tag="prepare", array_like=True):
    requests: list[tuple[int, ChatRequest]]


Change = Load | Open | Stop | Cancel | Add | Prepare
KINDS = {kind.__struct_config__.tag: kind for kind in (Load, Open, Stop, Cancel, Add, Prepare)}
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[Change])


def encode(changes: list[tuple]) -> bytes:
    """The changes as rank 0 holds them (`("add", ids)`) in their wire form."""
    return _encoder.encode([KINDS[kind](*args) for kind, *args in changes])


def decode(data: bytes) -> list[tuple]:
    """The changes back as tuples; anything not of their shapes is a DecodeError."""
    changes = _decoder.decode(data)
    return [(c.__struct_config__.tag, *msgspec.structs.astuple(c)) for c in changes]


class Channel:
    """Rank 0's changes to every rank, each tagged with the launch's key and its step."""

    def __init__(self, group, key: bytes) -> None:
        self.group, self._key, self._step = group, key, 0

    def share(self, changes: list[tuple] | None = None) -> list[tuple] | None:
        """Rank 0's `changes` on every rank (the others pass None and get rank 0's)."""
        self._step += 1
        lead = self.group.rank() == 0
        data = b""
        if lead and changes is not None:
            body = encode(changes)
            data = self._tag(body) + body
        data = _broadcast(self.group, data, lead)
        if not data:
            return None
        tag, body = data[:TAG_BYTES], data[TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(body)):
            raise RingRefused(f"step {self._step}: a message not from rank 0 (its tag is wrong)")
        return decode(body)

    def _tag(self, body: bytes) -> bytes:
        step = self._step.to_bytes(8, "big")
        return hmac.new(self._key, step + body, hashlib.sha256).digest()


def authenticate(group, key: bytes) -> None:
    """Every rank proves it holds `key`, before anything else crosses the ring: each sends a
    fresh nonce, then its HMAC of its rank and every nonce; a rank whose proof is wrong (or
    a peer that is not a rank) fails the start with RingRefused."""
    nonces = _all_gather_bytes(group, os.urandom(NONCE_BYTES))
    challenge = b"".join(nonces)
    tags = _all_gather_bytes(group, _proof(key, group.rank(), challenge))
    for rank, tag in enumerate(tags):
        if not hmac.compare_digest(tag, _proof(key, rank, challenge)):
            raise RingRefused(f"rank {rank} did not prove the launch's key")


def _proof(key: bytes, rank: int, challenge: bytes) -> bytes:
    return hmac.new(key, b"rank %d " % rank + challenge, hashlib.sha256).digest()


def _broadcast(group, data: bytes, lead: bool) -> bytes:
    # The decode loop evaluates the next step ahead (mx.async_eval) on mlx-lm's generation
    # stream: these go on that stream too, after its collectives, or the two interleave on
    # the ranks' connections.
    from mlx_lm.generate import generation_stream

    size = mx.distributed.all_sum(
        mx.array([len(data)], dtype=mx.int64), group=group, stream=generation_stream
    )
    size = int(size.item())
    if size == 0:
        return b""
    raw = mx.array(memoryview(data), dtype=mx.uint8) if lead else mx.zeros(size, dtype=mx.uint8)
    raw = mx.distributed.all_sum(raw, group=group, stream=generation_stream)
    return bytes(memoryview(raw))


def _all_gather_bytes(group, data: bytes) -> list[bytes]:
    """Every rank's `data` (all of one length), in rank order, on every rank."""
    from mlx_lm.generate import generation_stream

    joined = mx.distributed.all_gather(
        mx.array(memoryview(data), dtype=mx.uint8), group=group, stream=generation_stream
    )
    raw = bytes(memoryview(joined))
    return [raw[i : i + len(data)] for i in range(0, len(raw), len(data))]


def gather(group, value: int) -> list[int]:
    """Every rank's `value`, in rank order, on every rank."""
    from mlx_lm.generate import generation_stream

    values = mx.distributed.all_gather(
        mx.array([value], dtype=mx.int64), group=group, stream=generation_stream
    )
    return [int(v) for v in values.tolist()]
