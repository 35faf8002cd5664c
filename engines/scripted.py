"""A deterministic engine with no weights, for tests and demos.

It renders the prompt with a ChatML template and counts tokens with a real byte-level
tokenizer, so usage and the `generated` event carry real counts; the reply goes out word by
word through the same output parsing as a real model's (reasoning, tool calls, stops).
`script.replies` gives a different reply to each request in turn (a tool call that is
broken the first time and right the second, to exercise the guardrails' re-ask); a
`context.max` sets its window, so overflow policies apply as they do to a real model.
Under a constraint it answers as a masked model would, with a valid instance: its reply when
the reply fits, else `script.constrained`'s first that fits, else a short instance the
grammar allows (engines/text/instance.py).
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from engines.base import Capabilities, LoadInfo
from engines.batch import Batch, SerialBatch, Step
from engines.errors import ConstraintViolated, ContextOverflow
from engines.text.constrain import plan_for
from engines.text.constraint_state import ConstraintState, make_tokenizer
from engines.text.instance import shortest_instance
from engines.text.output import DEFAULT_TOOL_PARSER, OutputParser, load_tool_format
from engines.text.reasoning import DEFAULT_THINK
from engines.text.tools import template_messages
from schemas.canonical import ChatRequest, Finished, Output
from schemas.config import ScriptConfig, size_bytes
from schemas.logprobs import Logprobs, TokenLogprob, TopLogprob

SCRIPTED_CONTEXT = 8192
BYTE_VOCAB = 256
END_OF_TEXT = "<|end|>"


def make_byte_tokenizer() -> Tokenizer:
    """One token per UTF-8 byte: no vocabulary file needed, and counts are exact."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def render_chatml(request: ChatRequest) -> str:
    """The prompt a ChatML model would see, tools included, or the raw prompt as is."""
    if request.raw_prompt is not None:
        return request.raw_prompt
    messages = template_messages(request.messages, request.tools, knows_tools=False)
    turns = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(turns) + "<|im_start|>assistant\n"


class ScriptedEngine:
    capabilities = Capabilities(chat=True)

    def __init__(
        self,
        script: ScriptConfig,
        tool_parser: str | None = None,
        context: int | str = "auto",
        model_id: str = "scripted",
    ) -> None:
        self._id = model_id
        self._script = script
        self._tokenizer = make_byte_tokenizer()
        self._tool_format = load_tool_format(tool_parser or DEFAULT_TOOL_PARSER)
        self._context = context if isinstance(context, int) else SCRIPTED_CONTEXT
        self._replies = itertools.cycle(script.replies or [script.reply])
        self._turn = threading.Lock()
        self._steps = itertools.count(1)  # batch steps over the engine's life (`fail_step`)
        self._grammar_tokenizer = None

    def estimate_memory(self) -> int:
        return size_bytes(self._script.memory)

    def reasons(self) -> bool:
        """A scripted model "reasons" when its replies hold think blocks."""
        return any("<think>" in reply for reply in self._script.replies or [self._script.reply])

    def load(self, memory_left: int | None = None) -> LoadInfo:
        memory = size_bytes(self._script.memory)
        time.sleep(self._script.load_delay)  # on the model's thread, as a real load runs
        return LoadInfo(memory_bytes=memory, context=self._context, detail={"engine": "scripted"})

    def count_prompt(self, request: ChatRequest) -> int:
        if request.prompt_ids is not None:
            return len(request.prompt_ids)
        return self._count(render_chatml(request))

    def generate(self, request: ChatRequest, cancelled: Callable[[], bool]) -> Iterator[Output]:
        start = time.perf_counter()
        prompt_tokens = self.count_prompt(request)
        window = request.window_of(self._context)
        if prompt_tokens >= window:
            raise ContextOverflow(self._id, prompt_tokens, window, request.window_setting(window))
        budget = min(request.max_tokens, window - prompt_tokens)  # the answer fits the window
        prefill_s = time.perf_counter() - start
        with self._turn:
            reply = next(self._replies)
        reply = self._constrained_reply(request, reply)
        words = re.findall(r"\s*\S+", reply)
        parser = OutputParser.for_request(request, self._tool_format)
        if request.controls.logprobs and request.controls.logprobs.prompt:
            yield self._logprobs(render_chatml(request), prompt=True)
        emitted = ""
        spent = 0  # tokens of `emitted`: one per byte, so counted word by word
        stop_reason = "stop"
        for i, word in enumerate(words):
            if cancelled():
                stop_reason = "cancelled"
                break
            cost = self._count(word)
            if spent + cost > budget:
                stop_reason = "length"
                break
            if i == self._script.fail_after:
                # An engine fault, not a request's error: what an MLX failure looks like.
                raise RuntimeError(f"scripted failure after {i} words: {emitted!r}")
            if i and self._script.token_delay:
                time.sleep(self._script.token_delay)
            emitted += word
            spent += cost
            if request.controls.logprobs:
                yield self._logprobs(word, top=request.controls.logprobs.top)
            yield from parser.feed(word)
            if parser.stopped:
                stop_reason = "stop_string"
                break
        yield from parser.finish(stop_reason)
        stop_reason = parser.stop_reason(stop_reason)
        yield Finished(
            stop_reason=stop_reason,
            prompt_tokens=prompt_tokens,
            new_tokens=spent,
            prefill_s=prefill_s,
            decode_s=time.perf_counter() - start - prefill_s,
        )

    def open_batch(self) -> Batch:
        return ScriptedBatch(self.generate, self._steps, self._script.fail_step)

    def trim(self) -> None:
        """Nothing cached: a scripted model holds no buffers."""

    def unload(self) -> None:
        pass

    def _constrained_reply(self, request: ChatRequest, reply: str) -> str:
        """The reply a constrained request gets, valid as a real model's masked output is:
        the turn's reply when the constraint's grammar takes it (after any think block it
        opens with); else the first of `script.constrained` that fits; else, with none
        given, a short instance the grammar allows. What cannot be made valid is the
        script's fault: ConstraintViolated (a 400 that says so)."""
        fmt = self._tool_format
        think_end = DEFAULT_THINK.end if reply.lstrip().startswith(DEFAULT_THINK.start) else None
        plan = plan_for(request, fmt.parse.__module__, (fmt.start, fmt.end), think_end)
        if plan is None:
            return reply
        broken = self._breaks(plan, reply)
        if broken is None:
            return reply
        bare = plan_for(request, fmt.parse.__module__, (fmt.start, fmt.end), None)
        if self._script.constrained:
            for given in self._script.constrained:
                if self._breaks(bare, given) is None:
                    return given
            raise ConstraintViolated(
                f"model {self._id!r}: its script has no reply that fits the request's "
                f"constraint: the scripted reply {broken}, and so does each of "
                "script.constrained; add one that fits"
            )
        instance = shortest_instance(bare, self._grammar())
        if instance is None:
            raise ConstraintViolated(
                f"model {self._id!r}: the scripted reply {broken}, and the constraint has "
                "no short instance to answer with instead; give one in its "
                "script.constrained"
            )
        return instance

    def _breaks(self, plan, reply: str) -> str | None:
        """How `reply` breaks `plan`, as the same grammar a real model is masked with checks
        it token by token; None when it fits."""
        grammar = self._grammar()
        state = ConstraintState(plan, grammar)
        done = ""
        for token in grammar.tokenize_str(reply):
            if not state.advance(token):
                return f"breaks it after {done!r}: {state.error().splitlines()[0]}"
            done += grammar.decode_str([token])
        return None if state.accepting() else "ends before it is satisfied"

    def _grammar(self):
        """llguidance's tokenizer over the byte vocabulary, built on first use."""
        if self._grammar_tokenizer is None:
            tokenizer = make_byte_tokenizer()
            tokenizer.add_special_tokens([END_OF_TEXT])  # llguidance needs an end token
            vocab = BYTE_VOCAB + 1
            self._grammar_tokenizer = make_tokenizer(tokenizer.to_str(), vocab, [BYTE_VOCAB])
        return self._grammar_tokenizer

    def _logprobs(self, text: str, top: int = 0, prompt: bool = False) -> Logprobs:
        """A script is certain of every token: log-probability 0 (the prompt's first: none)."""
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        tokens = []
        for i, token in enumerate(ids):
            piece = self._tokenizer.decode([token])
            raw = list(piece.encode())
            logprob = None if prompt and i == 0 else 0.0
            alternatives = [TopLogprob(token=piece, bytes=raw, logprob=0.0)] if top else []
            tokens.append(TokenLogprob(token=piece, bytes=raw, logprob=logprob, top=alternatives))
        return Logprobs(tokens=tokens, prompt=prompt)

    def _count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


class ScriptedBatch(SerialBatch):
    """`SerialBatch`, whose step number `fail_step` raises as a failed forward pass would."""

    def __init__(self, generate, steps: Iterator[int], fail_step: int | None) -> None:
        super().__init__(generate)
        self._steps = steps
        self._fail_step = fail_step

    def step(self) -> list[Step]:
        if next(self._steps) == self._fail_step:
            raise RuntimeError(f"scripted failure of batch step {self._fail_step} (fail_step)")
        return super().step()
