"""Anthropic's `cache_control` breakpoints as the prefixes to keep cached (`KeepMark`): on
tools and system blocks the prompt through the system prompt, on a message's block the
prompt through that message (a shorter shared prefix is still read from it: a kept cache is
cut to what a later prompt shares). At most four, as Anthropic allows."""

from __future__ import annotations

from engines.errors import BadRequest
from schemas import anthropic as wire
from schemas.canonical import KeepMark

MAX_BREAKPOINTS = 4
TTL_S = {"5m": 300.0, "1h": 3600.0}


def keep_marks(data: wire.PromptRequest, starts: list[int]) -> tuple[KeepMark, ...]:
    """The request's breakpoints; `starts[i]` is where turn i begins among the canonical
    messages (`to_messages`), with one more entry for the end of the last turn."""
    system = starts[0]  # the canonical messages before the first turn: the system prompt
    marks: list[tuple[int, str]] = [
        (system, tool.cache_control.ttl) for tool in data.tools if tool.cache_control
    ]
    if isinstance(data.system, list):
        marks += [(system, b.cache_control.ttl) for b in data.system if b.cache_control]
    for i, turn in enumerate(data.messages):
        if isinstance(turn.content, str):
            continue
        end = system if turn.role == "system" else starts[i + 1]
        marks += [(end, block.cache_control.ttl) for block in _blocks(turn.content)]
    if len(marks) > MAX_BREAKPOINTS:
        raise BadRequest(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {len(marks)}."
        )
    return tuple(KeepMark(messages=n, ttl_s=TTL_S[ttl]) for n, ttl in marks)


def _blocks(content: list[wire.InputBlock]) -> list[wire.Block]:
    """The blocks carrying `cache_control`, those inside tool results too."""
    marked = []
    for block in content:
        if block.cache_control:
            marked.append(block)
        if isinstance(block, wire.ToolResultBlock) and isinstance(block.content, list):
            marked += [inner for inner in block.content if inner.cache_control]
    return marked
