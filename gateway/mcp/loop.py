"""The tool loop for chat completions, Anthropic Messages and Ollama's chat (`run_tools`),
on the canonical output stream: the model's calls of MCP tools are withheld from the
client, made, and their results heard by the model in a next generation, until it answers
without one; the client sees one answer (the rounds' text, one `Finished` whose usage
counts them all).

At most MAX_CALLS calls an answer: past them the model is asked again without the MCP
tools and must answer. A round that also calls a tool the client declared ends the answer
there with the client's calls; that round's MCP calls are not made (the client's history
cannot hold them; the model may call them again in the next turn)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from msgspec.structs import replace

from engines.chat import serve_chat
from engines.runner import Runner
from gateway.mcp.calls import call_tool, for_model
from gateway.mcp.offered import OfferedTools
from schemas.canonical import (
    ChatAsk,
    Finished,
    Message,
    Output,
    TextDelta,
    ToolCall,
    ToolCallOutput,
)

MAX_CALLS = 8  # calls of one answer (a Responses request without `max_tool_calls`: the same)
# Between the text of two rounds: "Checking." then "The sum is 5." do not run together.
ROUND_BREAK = "\n\n"


@dataclass
class Totals:
    """Usage over every round: the answer's usage is what all its generations spent."""

    prompt: int = 0
    new: int = 0
    reused: int = 0
    written: int = 0

    def add(self, finished: Finished) -> None:
        self.prompt += finished.prompt_tokens
        self.new += finished.new_tokens
        self.reused += finished.reused_prefix_tokens
        self.written += finished.cache_written_tokens

    def finished(self, last: Finished) -> Finished:
        return replace(
            last,
            prompt_tokens=self.prompt,
            new_tokens=self.new,
            reused_prefix_tokens=self.reused,
            cache_written_tokens=self.written,
        )


def run_each(
    answers: list[AsyncIterator[Output]], runner: Runner, ask: ChatAsk, offered: OfferedTools
) -> list[AsyncIterator[Output]]:
    """Each answer (of `n`) through its own loop; unchanged unless the gateway runs tools."""
    if not offered.run or not offered.tools:
        return answers
    return [looped(answer, runner, ask, offered) for answer in answers]


async def looped(
    results: AsyncIterator[Output], runner: Runner, ask: ChatAsk, offered: OfferedTools
) -> AsyncIterator[Output]:
    totals, messages, made, spoke = Totals(), list(ask.messages), 0, False
    try:
        while True:
            calls: list[ToolCall] = []
            said: list[str] = []
            theirs = False  # a call of a tool the client declared: the answer ends with it
            async for output in results:
                if isinstance(output, ToolCallOutput):
                    if output.call.name in offered.tools:
                        calls.append(output.call)  # never streamed: the gateway makes it
                        continue
                    theirs = True
                elif isinstance(output, TextDelta) and output.text:
                    if spoke and not said:
                        yield TextDelta(text=ROUND_BREAK)
                    said.append(output.text)
                elif isinstance(output, Finished):
                    totals.add(output)
                    going_on = calls and not theirs and output.stop_reason in ("stop", "tool_calls")
                    if going_on:
                        continue  # not the end: the model hears the results first
                    output = totals.finished(output)
                    calls = []
                yield output
            if not calls:
                return
            answers = []
            for call in calls:
                if made >= MAX_CALLS:
                    text = f"not run: this answer's {MAX_CALLS} tool calls were made"
                else:
                    made += 1
                    text = for_model(await call_tool(offered.tools[call.name].server, call))
                answers.append(
                    Message(role="tool", content=text, tool_call_id=call.id, name=call.name)
                )
            spoke = spoke or bool(said)
            turn = Message(role="assistant", content="".join(said), tool_calls=calls)
            messages += [turn, *answers]
            ask = _next_ask(ask, messages, offered, done=made >= MAX_CALLS)
            _, (results,), _ = await serve_chat(runner, ask)
    finally:
        await results.aclose()


def _next_ask(
    ask: ChatAsk, messages: list[Message], offered: OfferedTools, *, done: bool
) -> ChatAsk:
    """The next round: the results heard; a forced call was made, so the choice is free;
    with every allowed call made, no MCP tools (the client's stay)."""
    controls = replace(ask.controls, tool_choice="auto", forced_tool=None)
    if not done:
        return replace(ask, messages=messages, controls=controls)
    tools = [t for t in ask.tools if t.name not in offered.tools]
    strict = [name for name in controls.strict_tools if name not in offered.tools]
    controls = replace(controls, strict_tools=strict)
    return replace(ask, messages=messages, tools=tools, controls=controls)
