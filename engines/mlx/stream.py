"""One request decoded by a `stream_generate` loop (mlx-lm's or mlx-vlm's), from its responses
to its outputs: the text through the output parser, stop strings, cancellation, the reason it
ended and when its first token came, then its `Finished`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from engines.text.output import OutputParser
from schemas.canonical import Output, PromptRead


class StreamRun:
    """The state of one streamed generation; `started` is taken when it is made."""

    def __init__(self, parser: OutputParser) -> None:
        self.parser = parser
        self.started = time.perf_counter()
        self.first_at: float | None = None
        self.last = None  # the latest response: its counts are the generation's so far
        self.reason = "stop"
        self.completed = False  # the responses ran out (nothing broke the loop)

    def follow(
        self,
        responses: Iterable,
        cancelled: Callable[[], bool],
        lead: Callable[[object], Iterable[Output]] | None = None,
        read: Callable[[object], PromptRead] | None = None,
    ) -> Iterator[Output]:
        """Each response's text through the parser, until a stop string, cancellation or the
        end; `lead(response)` gives what goes before a response's text (its logprobs),
        `read(first response)` how the prompt was read (told before the first token)."""
        for response in responses:
            if self.first_at is None and read is not None:
                yield read(response)
            self.first_at = self.first_at or time.perf_counter()
            self.last = response
            if lead is not None:
                yield from lead(response)
            yield from self.parser.feed(response.text)
            if self.parser.stopped:
                self.reason = "stop_string"
                return
            if response.finish_reason:
                self.reason = response.finish_reason
            if cancelled():
                self.reason = "cancelled"
                return
        self.completed = True

    def end(self, prompt_tokens: int, new_tokens: int, **counts) -> list[Output]:
        """What ends it (`OutputParser.end`); `counts`: the rest of `Finished`."""
        return self.parser.end(
            self.reason,
            started=self.started,
            first_at=self.first_at,
            prompt_tokens=prompt_tokens,
            new_tokens=new_tokens,
            **counts,
        )
