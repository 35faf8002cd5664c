"""Checking a request's client-written schemas (tool declarations, a response format) where
the gateway's event loop cannot feel it.

`check_chat` on a large schema is seconds of pure Python (jsonschema's meta-schema check,
the grammar compile): on a worker thread it still holds the GIL, and the event loop that
answers every other client (and /health) waits for it in turns, once for over a second. So
schemas past `IN_PROCESS_BYTES` are checked in a process of their own (one pool for the
gateway, started at the first such request); small ones, the usual case, on the thread
that calls, as the hop to another process would cost more than their check.
"""

from __future__ import annotations

import atexit
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import msgspec

from engines.policy.request import check_chat
from schemas.canonical import ChatRequest

IN_PROCESS_BYTES = 64 * 1024  # schemas up to this size (as JSON) are checked in this process
WORKERS = 2  # large-schema checks at once; more wait their turn

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def check_schemas(request: ChatRequest) -> None:
    """`check_chat(request)`, in a worker process where its schemas are large. Blocking:
    call it off the event loop (it waits on the worker without holding the GIL)."""
    if schema_bytes(request) <= IN_PROCESS_BYTES:
        check_chat(request)
        return
    try:
        refused = _workers().submit(_check, request).result()
    except BrokenProcessPool:  # a worker died (killed, out of memory): a new pool next time
        _drop_pool()
        raise
    if refused is not None:
        cls, args, attributes = refused
        error = cls.__new__(cls)
        error.args = args
        vars(error).update(attributes)
        raise error


def schema_bytes(request: ChatRequest) -> int:
    """The size of the request's client-written schemas, as JSON."""
    size = sum(len(msgspec.json.encode(t.parameters)) for t in request.tools if t.parameters)
    fmt = request.controls.format
    return size + (len(msgspec.json.encode(fmt.schema)) if fmt and fmt.schema else 0)


def _check(request: ChatRequest) -> tuple | None:
    """In the worker: None, or the refusal packed as its class, args and attributes (a
    gateway error's constructor may take other arguments than its args)."""
    try:
        check_chat(request)
    except Exception as error:
        return type(error), error.args, dict(vars(error))
    return None


def _workers() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            # spawn: never a fork of a process with threads (the loop, the model threads).
            context = multiprocessing.get_context("spawn")
            _pool = ProcessPoolExecutor(WORKERS, mp_context=context)
            # Before multiprocessing's own exit handler, which would wait for the workers
            # (the gateway leaves through atexit: gateway/cli.py `leave`).
            atexit.register(_drop_pool)
        return _pool


def _drop_pool() -> None:
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is None:
        return
    workers = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:  # a check under way is not waited for: its client is gone
        worker.terminate()
