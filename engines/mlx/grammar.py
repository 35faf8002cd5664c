"""The grammar's token mask as an mlx-lm logits processor, applied with plain MLX ops.

llguidance fills a bitmask (one bit per token) with its numpy helper; MLX expands it and
sets every refused token's logit to -inf. (llguidance's own `llguidance.mlx` helper is a
Metal kernel: it fails on the CPU backend.) mlx-lm calls a processor with the tokens so
far, the last one being the token just sampled, so the matcher advances there, before the
step's forward pass is queued: the mask costs its own CPU time (~0.7 ms a sequence on
SmolLM2's 49k vocabulary), while mlx-lm still overlaps the step's compute with the caller's
handling of the previous token.
"""

from __future__ import annotations

from collections.abc import Callable

from engines.text.constrain import plan_for
from engines.text.constraint_state import ConstraintState, make_tokenizer
from engines.text.output import ToolFormat
from engines.text.reasoning import ThinkMarkers, opens_thinking
from schemas.canonical import ChatRequest


class Grammar:
    """One model's side of constrained decoding: llguidance's tokenizer (built once, at the
    first use, from the model's `tokenizers` JSON) and each request's mask processor."""

    def __init__(
        self, model, tokenizer, encode, think: ThinkMarkers, tool_format: ToolFormat | None
    ):
        """`encode`: text to ids (the engine's `TextEncoder`)."""
        self._model = model
        self._tokenizer = tokenizer
        self._encode = encode
        self._think = think
        self._format = tool_format
        self._built = None

    @property
    def tokenizer(self):
        if self._built is None:
            backend = self._tokenizer._tokenizer.backend_tokenizer
            eos = sorted(self._tokenizer.eos_token_ids)
            vocab = self._model.args.vocab_size
            self._built = make_tokenizer(backend.to_str(), vocab, eos)
        return self._built

    def piece(self, token: int) -> bytes:
        """A token's bytes (a token may hold part of a UTF-8 character)."""
        return self.tokenizer.decode_bytes([token])

    def processors(self, request: ChatRequest, prompt_tail: str) -> list[Callable]:
        """The request's logits processors: its grammar's mask, or none when unconstrained."""
        fmt, think = self._format, self._think
        opened = request.raw_prompt is None and opens_thinking(prompt_tail, think)
        plan = plan_for(
            request,
            fmt.parse.__module__ if fmt else None,
            (fmt.start, fmt.end) if fmt else None,
            think.end if opened else None,
        )
        if plan is None:
            return []
        may_think = None
        if request.raw_prompt is None and not opened and request.reasoning != "off":
            start = self._encode(think.start, add_special_tokens=False)
            if getattr(self._tokenizer, "has_thinking", False) and len(start) == 1:
                may_think = (start[0], think.end.encode())
        state = ConstraintState(plan, self.tokenizer, may_think)
        return [MaskProcessor(state, self._model.args.vocab_size)]


class MaskProcessor:
    """One sequence's constraint, as mlx-lm's `logits_processors` entry."""

    def __init__(self, state: ConstraintState, vocab_size: int) -> None:
        import llguidance.numpy as lln
        import mlx.core as mx

        self._state = state
        self._mask = lln.allocate_token_bitmask(1, vocab_size)
        self._fill = lln.fill_next_token_bitmask
        self._shifts = mx.arange(32, dtype=mx.uint32)
        self._first = True

    def __call__(self, tokens, logits):
        # The first call sees the last prompt token: nothing sampled yet. Later ones see the
        # token just sampled. Reading it waits only for that token: this step's forward pass
        # is not queued yet. (Queueing it first would make every read here wait for it, and
        # mlx-lm's pipelining of one step's compute with the last step's output would end.)
        token = None if self._first else int(tokens[-1].item())
        self._first = False
        return self.apply(token, logits)

    def apply(self, token: int | None, logits):
        """Advance the matcher by `token`, then mask `logits` to what the grammar allows."""
        import mlx.core as mx
        import numpy as np

        if token is not None:
            # After end-of-sequence mlx-lm may run one step more; a refusal then is moot.
            self._state.advance(token)
        matcher = self._state.matcher
        if matcher is None or matcher.is_error():
            # Free text; or a call whose marker ended mid-token in text the grammar refused:
            # that call goes to the guardrails like any malformed one.
            return logits
        self._fill(matcher, self._mask)
        extra = self._state.extra_token
        if extra is not None:
            self._mask.view(np.uint32)[0, extra // 32] |= np.uint32(1 << (extra % 32))
        words = mx.array(self._mask.view(np.uint32))
        allowed = ((words[:, :, None] >> self._shifts) & 1).reshape(1, -1)
        allowed = allowed[:, : logits.shape[-1]].astype(mx.bool_)
        return mx.where(allowed, logits, mx.array(-mx.inf, dtype=logits.dtype))
