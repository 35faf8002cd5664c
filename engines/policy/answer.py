"""A model's declared policies around its runner: the one path every chat protocol takes.

`answer(runner, request)` is what adapters call instead of submitting to the runner
themselves. It applies, identically for every protocol:

1. `context.overflow: truncate` — the oldest turns dropped until the prompt fits, counted on
   a worker thread before the request joins the queue (so the model's thread, which decodes
   every admitted request together, never stalls on it);
2. `guardrails.tool_calls` — every call the model emits checked, repaired, refused, or sent
   back to the model once.

The re-ask is a second job on the same runner, submitted when the first one has finished:
it joins the back of the FIFO like any request, so no one who arrived meanwhile is
overtaken, and its queue wait, its `request_queued` and its own `generated` event are the
truth about the work it took. (Running it inside the first job's slot would hold the model
for two generations while the queue believes it holds one.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from msgspec.structs import replace

from engines.errors import ContextOverflow, ToolCallRefused
from engines.log import emit
from engines.policy.guardrails import CallChecker, Verdict, reask_message
from engines.policy.overflow import explain
from engines.policy.truncation import fit_messages
from engines.runner import Runner
from engines.text.constrain import constrained_calls
from schemas.canonical import (
    ChatRequest,
    Finished,
    MalformedToolCall,
    Message,
    Output,
    PromptRead,
    TextDelta,
    ToolCall,
    ToolCallOutput,
)
from schemas.events import Guardrail


async def answer(
    runner: Runner, request: ChatRequest, told: Callable[[PromptRead], None] | None = None
) -> AsyncIterator[Output]:
    """The request's outputs under its model's policies; closing this early cancels its job.
    `told(read)`: how the engine read the prompt, before the first output (if it said).

    The request holds its model from the first step (counting its prompt) to its end, so an
    idle unload cannot come between counting, fitting and queueing, or before a re-ask.
    """
    # Closing this closes the inner generator at once, which cancels the job.
    inner = _answer(runner, request, told)
    async with runner.hold(), contextlib.aclosing(inner) as outputs:
        async for output in outputs:
            yield output


async def _answer(
    runner: Runner, request: ChatRequest, told: Callable[[PromptRead], None] | None
) -> AsyncIterator[Output]:
    request = await _fit(runner, request)
    checker = CallChecker(request.tools, request.tool_policy) if request.tools else None
    guard = _Guard(runner.model.id, checker, constrained_calls(request))
    first: Finished | None = None  # the first answer's accounting, once it is re-asked
    attempt = request
    while True:
        job = runner.submit(attempt)
        results = runner.results(job)
        try:
            async for output in results:
                if told is not None and job.read is not None:  # the first answer's read
                    told(job.read)
                    told = None
                if isinstance(output, ToolCallOutput | MalformedToolCall) and checker:
                    # Validation runs client-written schemas (patterns, deep nesting): on a
                    # worker thread, so one request's schema never stalls the event loop.
                    passed = await asyncio.to_thread(guard.judge, output, first is not None)
                    if passed is not None:
                        yield passed
                    continue
                if isinstance(output, TextDelta):
                    guard.said.append(output.text)
                if isinstance(output, Finished):
                    if first is None and guard.bad and output.stop_reason != "cancelled":
                        first = output
                        break  # re-ask: the first job is over, its outputs are all in
                    yield output if first is None else _merged(first, output)
                    return
                yield output
        except ContextOverflow as error:
            if first is None:
                raise await asyncio.to_thread(
                    explain, error, attempt, runner.engine.count_prompt
                ) from None
            raise ToolCallRefused(
                f"model {runner.model.id!r}: its tool call failed the guardrails and the "
                f"re-ask does not fit the window: {error.message}"
            ) from None
        finally:
            # Also when the client leaves mid-answer: closing the stream cancels the job.
            await results.aclose()
        attempt = guard.reask(request)


async def _fit(runner: Runner, request: ChatRequest) -> ChatRequest:
    if request.overflow != "truncate" or request.raw_prompt is not None:
        return request  # `reject` is the engine's: it refuses a prompt past the window
    tokens = await runner.count_prompt(request)  # loads an on-demand model first
    return await asyncio.to_thread(
        fit_messages,
        runner.model.id,
        request,
        runner.engine.count_prompt,
        request.window_of(runner.context),
        tokens,
    )


class _Guard:
    """The tool-call verdicts of one request, across its first answer and one re-ask."""

    def __init__(
        self, model_id: str, checker: CallChecker | None, constrained: set[str] = frozenset()
    ) -> None:
        self._model = model_id
        self._checker = checker
        self._constrained = constrained  # tools whose calls were decoded under their schema
        self.said: list[str] = []  # the first answer's text, for the re-ask's assistant turn
        self.bad: list[tuple[ToolCall | MalformedToolCall, Verdict]] = []

    def judge(
        self, output: ToolCallOutput | MalformedToolCall, last_try: bool
    ) -> ToolCallOutput | TextDelta | None:
        """What the client gets for one call: the call (maybe repaired), or nothing yet."""
        call = output.call if isinstance(output, ToolCallOutput) else output
        verdict = self._checker.check(call)
        policy = self._checker.policy
        if verdict.problem is None:
            if verdict.tool in self._constrained:  # valid by construction: nothing to repair
                self._event(verdict, "constrained")
            return ToolCallOutput(verdict.call)
        if policy == "off":
            self._event(verdict, "passed")
            return output if isinstance(output, ToolCallOutput) else TextDelta(output.raw)
        if verdict.call is not None:  # repaired (strict never repairs)
            self._event(verdict, "repaired")
            return ToolCallOutput(verdict.call)
        if policy == "strict" or last_try:
            self._event(verdict, "refused", level="warning")
            tried = " after one re-ask" if last_try else ""
            # A call cut or garbled before its name names no tool: say so, never "None".
            which = "tool call (naming no tool)"
            if verdict.tool:
                which = f"call of tool {verdict.tool!r}"
            raise ToolCallRefused(
                f"model {self._model!r}: its {which} failed the "
                f"guardrails{tried}: {verdict.problem} (guardrails.tool_calls: {policy})"
            )
        self.bad.append((call, verdict))
        return None

    def reask(self, request: ChatRequest) -> ChatRequest:
        """The conversation again, with what the model said and why its call was refused."""
        for _, verdict in self.bad:
            self._event(verdict, "reasked")
        calls = [c for c, _ in self.bad if isinstance(c, ToolCall)]
        raws = "".join(c.raw for c, _ in self.bad if isinstance(c, MalformedToolCall))
        said = Message(role="assistant", content="".join(self.said) + raws, tool_calls=calls)
        told = Message(role="user", content=reask_message([v.problem for _, v in self.bad]))
        return replace(request, messages=[*request.messages, said, told])

    def _event(self, verdict: Verdict, action: str, level: str = "info") -> None:
        problem = verdict.problem or ""
        emit(
            Guardrail(model=self._model, tool=verdict.tool, problem=problem, action=action),
            level=level,
        )


def _merged(first: Finished, second: Finished) -> Finished:
    """The client's accounting of a re-asked answer: both generations' work, summed."""
    return replace(
        second,
        prompt_tokens=first.prompt_tokens + second.prompt_tokens,
        new_tokens=first.new_tokens + second.new_tokens,
        prefill_s=first.prefill_s + second.prefill_s,
        decode_s=first.decode_s + second.decode_s,
    )
