"""What one generation of the text engine starts from (`Prepared`), and the loaded model's
tokenizer side that makes it (`Preparer`): the prompt through the chat template and the
tokenizer, the budget, the sampler, the logits processors, the output parser."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from msgspec.structs import replace

from engines import timeline
from engines.errors import BadRequest
from engines.mlx.cache.prefix import shared_prefix
from engines.mlx.detokenize import byte_detokenizer
from engines.mlx.encode import TextEncoder
from engines.mlx.grammar import Grammar
from engines.mlx.penalties import make_penalties
from engines.mlx.prepare import start
from engines.mlx.template import render_chat
from engines.text.output import DEFAULT_TOOL_PARSER, OutputParser, ToolFormat, load_tool_format
from engines.text.reasoning import thinking_markers
from engines.text.tools import fold_system_turns, template_messages
from schemas.canonical import ChatRequest
from schemas.config import ModelConfig
from schemas.logprobs import Logprobs


class Prepared(NamedTuple):
    prompt: list[int]
    max_tokens: int
    sampler: Callable
    parser: OutputParser
    seed: int | None
    # Applied to each step's logits before sampling, on every decoding path.
    logits_processors: tuple[Callable, ...] = ()
    # The request's logprobs: top alternatives per token (None: none asked), a token's bytes.
    logprobs: int | None = None
    piece: Callable[[int], bytes] | None = None
    # Prefixes to keep cached (`cache_control`): (prompt tokens, seconds to live) each.
    keep: tuple[tuple[int, float], ...] = ()
    # The adapter slot the request runs under (engines/llm/adapters.py); None: the base.
    adapter: int | None = None
    adapter_scale: float | None = None  # the row's own (a request's `lora`), else the slot's


class Preparer:
    """A loaded model's tokenizer side, for its window of `context` tokens."""

    def __init__(self, config: ModelConfig, model, tokenizer, context: int) -> None:
        self._config = config
        self._model = model
        self._tokenizer = tokenizer
        self.context = context
        self._text_encoder = TextEncoder(tokenizer)
        # A ByteDetokenizer to copy for each sequence, or None (mlx-lm's own then).
        self._detokenizer = byte_detokenizer(tokenizer.detokenizer)
        self.eos_ids = set(tokenizer.eos_token_ids)
        self._tool_format = pick_tool_format(config, tokenizer)
        self._think = thinking_markers(tokenizer)
        self._grammar = Grammar(
            model, tokenizer, self._text_encoder, self._think, self._tool_format
        )

    def count(self, request: ChatRequest) -> int:
        return len(self.encode(request))

    def prepare(self, request: ChatRequest, *, aside: bool = False) -> Prepared:
        """Everything one generation needs: prompt tokens, budget, sampler, output parser.

        `aside`: the prompt is tokenized on the encoder's own thread (`TextEncoder`): for
        the first request of an idle batch, which the model thread's state after a burst
        slows down."""
        prompt = self.encode(request, aside)
        if timeline.ON:
            timeline.mark("encoded")
        window = request.window_of(self.context)
        begun = start(
            self._config.id,
            prompt,
            window,
            request,
            self._tokenizer,
            self._tool_format,
            self._think,
        )
        # Penalties and bias first; the grammar's mask (engines/mlx/grammar.py) last, so
        # nothing lifts a token it refuses back from -inf.
        vocab = self._model.args.vocab_size
        processors = make_penalties(request.sampling, len(prompt), window, vocab)
        processors += self._grammar.processors(request, begun.tail)
        top = request.controls.logprobs.top if request.controls.logprobs else None
        piece = self._grammar.piece if request.controls.logprobs else None
        seed = request.sampling.seed
        return Prepared(
            prompt,
            begun.max_tokens,
            begun.sampler,
            begun.parser,
            seed,
            tuple(processors),
            top,
            piece,
            self.marked(request, prompt),
        )

    def marked(self, request: ChatRequest, prompt: list[int]) -> tuple[tuple[int, float], ...]:
        """The prompt tokens each marked prefix covers: its messages rendered alone share
        that many tokens with the whole prompt (0: it could not be rendered alone)."""
        if not request.keep or request.raw_prompt is not None or request.prompt_ids is not None:
            return ()
        marks = []
        for mark in request.keep:
            tokens = len(prompt)
            if mark.messages < len(request.messages):
                alone = replace(request, messages=request.messages[: mark.messages])
                try:
                    text = render_chat(self._tokenizer, alone, template_messages, fold_system_turns)
                    ids = self._text_encoder(text, add_special_tokens=False)
                except Exception:  # a template that refuses the messages alone
                    ids = []
                tokens = shared_prefix(ids, prompt)
            marks.append((min(tokens, len(prompt) - 1), mark.ttl_s))
        return tuple(marks)

    def prompt_logprobs(self, request: ChatRequest, prompt: list[int]) -> Logprobs | None:
        """The prompt's own token logprobs, when the request asked for them (echo)."""
        if not (request.controls.logprobs and request.controls.logprobs.prompt):
            return None
        from engines.mlx.logprobs import prompt_logprobs

        tokens = prompt_logprobs(
            self._model, prompt, request.controls.logprobs.top, self._grammar.piece
        )
        return Logprobs(tokens=tokens, prompt=True)

    def detokenizer(self):
        """A streaming detokenizer for one sequence: the table-driven one where the model's
        vocabulary is byte-level BPE (engines/mlx/detokenize.py), else mlx-lm's own."""
        if self._detokenizer is not None:
            return self._detokenizer.fresh()
        return self._tokenizer.detokenizer

    def encode(self, request: ChatRequest, aside: bool = False) -> list[int]:
        if request.prompt_ids is not None:
            vocab = self._model.args.vocab_size
            if any(not 0 <= t < vocab for t in request.prompt_ids):
                raise BadRequest(f"$.prompt: token ids must be in [0, {vocab})")
            return list(request.prompt_ids)
        if request.raw_prompt is not None:
            return self._text_encoder(request.raw_prompt, aside=aside)
        text = render_chat(self._tokenizer, request, template_messages, fold_system_turns)
        if timeline.ON:  # the chat template is rendered; the tokenizer comes next
            timeline.mark("rendered")
        # The template already wrote any BOS it wants; encoding must not add a second.
        return self._text_encoder(text, add_special_tokens=False, aside=aside)

    def close(self) -> None:
        self._text_encoder.close()


def pick_tool_format(config: ModelConfig, tokenizer) -> ToolFormat:
    """The config's `tool_parser`, else the tokenizer's own, else the fallback format."""
    if config.tool_parser:
        return load_tool_format(config.tool_parser)
    if tokenizer.has_tool_calling:
        return ToolFormat(tokenizer.tool_call_start, tokenizer.tool_call_end, tokenizer.tool_parser)
    return load_tool_format(DEFAULT_TOOL_PARSER)
