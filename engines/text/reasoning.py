"""Reasoning: the effort asked of the chat template, and the thinking cut out of the output.

Models that think write their reasoning between markers (`<think>…</think>`, or whatever
the tokenizer declares: mlx-lm's `TokenizerWrapper.think_start`/`think_end`). The
`ReasoningSplitter` separates that text from the answer as it streams, so it never reaches
the answer's stop strings or tool-call parsing, and each protocol can show it its own way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from engines.text.stops import partial_suffix
from schemas.canonical import Effort


class ThinkMarkers(NamedTuple):
    start: str
    end: str


DEFAULT_THINK = ThinkMarkers("<think>", "</think>")


def thinking_markers(tokenizer: Any) -> ThinkMarkers:
    """The tokenizer's own think markers where it declares them, else `<think>`/`</think>`."""
    if getattr(tokenizer, "has_thinking", False):
        return ThinkMarkers(tokenizer.think_start, tokenizer.think_end)
    return DEFAULT_THINK


# What a chat template of a model that reasons mentions: the think marker, the switch
# Qwen3 and others read, the effort gpt-oss reads.
REASONING_TEMPLATE_WORDS = ("<think>", "enable_thinking", "reasoning_effort")


def template_reasons(chat_template: str | None) -> bool:
    """Whether a chat template belongs to a model that reasons (see the words above)."""
    return bool(chat_template) and any(w in chat_template for w in REASONING_TEMPLATE_WORDS)


def effort_of(value: str | bool | None) -> Effort:
    """A config value as an effort: YAML's bare `off` reads as false, `true` as medium."""
    if value is None or value is False:
        return "off"
    if value is True:
        return "medium"
    return value  # type: ignore[return-value]


def template_kwargs(effort: Effort) -> dict[str, Any]:
    """What chat templates read: `enable_thinking` (Qwen3 and others; mlx-lm renames it
    for templates that call it `thinking`) and `reasoning_effort` (gpt-oss and others)."""
    if effort == "off":
        return {"enable_thinking": False}
    return {"enable_thinking": True, "reasoning_effort": effort}


def opens_thinking(prompt_tail: str, markers: ThinkMarkers) -> bool:
    """Whether the rendered prompt already opened a think block (some templates end the
    generation prompt with `<think>`), so the output starts inside the reasoning."""
    tail = prompt_tail.rstrip()
    return tail.endswith(markers.start) and not tail.endswith(markers.end)


class ReasoningSplitter:
    """Feed raw text; get back `(is_reasoning, text)` pieces in order.

    A tail that could be the start of a marker is held until the next text settles it.
    Whitespace between the markers and the text they enclose is dropped, as the model's
    layout rather than its words.
    """

    def __init__(self, markers: ThinkMarkers, opened: bool = False) -> None:
        self._markers = markers
        self._thinking = opened
        self._held = ""
        self._trim = opened  # drop whitespace at the start of the current piece

    def feed(self, text: str) -> list[tuple[bool, str]]:
        marker = self._markers.end if self._thinking else self._markers.start
        # Most tokens: nothing held or to trim, no marker's first character, and (thinking)
        # no whitespace at the end that the end marker could follow. The batch feeds every
        # token of every stream through here on the model thread.
        if (
            not self._held
            and not self._trim
            and marker[0] not in text
            and not (self._thinking and text[-1:].isspace())
        ):
            return [(self._thinking, text)] if text else []
        pieces: list[tuple[bool, str]] = []
        self._held += text
        while True:
            marker = self._markers.end if self._thinking else self._markers.start
            at = self._held.find(marker)
            if at < 0:
                keep = partial_suffix(self._held, marker)
                if self._thinking:  # whitespace before the end marker is layout: hold it too
                    body = self._held[: len(self._held) - keep]
                    keep += len(body) - len(body.rstrip())
                self._emit(pieces, self._held[: len(self._held) - keep])
                self._held = self._held[len(self._held) - keep :]
                return pieces
            before = self._held[:at]
            self._emit(pieces, before.rstrip() if self._thinking else before)
            self._held = self._held[at + len(marker) :]
            self._thinking = not self._thinking
            self._trim = True

    def finish(self) -> list[tuple[bool, str]]:
        """What was held back, once generation has ended."""
        pieces: list[tuple[bool, str]] = []
        held, self._held = self._held, ""
        self._emit(pieces, held.rstrip() if self._thinking else held)
        return pieces

    def _emit(self, pieces: list[tuple[bool, str]], text: str) -> None:
        if self._trim:
            text = text.lstrip()
            if not text:
                return
            self._trim = False
        if text:
            pieces.append((self._thinking, text))
