"""What any generation of a request starts from, once its prompt is tokens: the room left in
the window (or its refusal), the request's own sampler and its output parser."""

from __future__ import annotations

from typing import NamedTuple

from engines.errors import ContextOverflow
from engines.mlx.sampling import Sampler, make_request_sampler
from engines.text.output import OutputParser, ToolFormat
from engines.text.reasoning import ThinkMarkers
from schemas.canonical import ChatRequest

# Prompt tokens decoded to see whether the template has opened a think block.
TAIL_TOKENS = 8


class Start(NamedTuple):
    max_tokens: int  # the request's budget, cut to the room left in the window
    sampler: Sampler
    parser: OutputParser
    tail: str  # the rendered prompt's end, as text


def start(
    model_id: str,
    prompt: list[int],
    window: int,
    request: ChatRequest,
    tokenizer,
    tool_format: ToolFormat | None,
    think: ThinkMarkers | None,
) -> Start:
    """The budget, sampler and parser of `request`, whose prompt is `prompt` in a `window`
    of tokens; ContextOverflow when the prompt leaves no room to generate."""
    if len(prompt) >= window:
        raise ContextOverflow(model_id, len(prompt), window, request.window_setting(window))
    s = request.sampling
    # A seeded request draws from its own key, never the generator its batch-mates share.
    sampler = make_request_sampler(s.temperature, s.top_p, s.min_p, s.top_k, s.seed)
    tail = tokenizer.decode(prompt[-TAIL_TOKENS:])  # has the template opened a think block?
    parser = OutputParser.for_request(request, tool_format, think, tail)
    return Start(min(request.max_tokens, window - len(prompt)), sampler, parser, tail)
