"""One sequence's way through its constraint plan, token by token, for every engine.

`ConstraintState` holds llguidance's matcher while the grammar applies and watches the
free text (reasoning, or answer text before a lazily constrained call) for the marker
that starts or resumes it; `make_tokenizer` builds the llguidance tokenizer it needs.
"""

from __future__ import annotations

from engines.text.constrain import Plan
from engines.text.grammars import load_llguidance

# Bytes of free text kept to spot a marker that arrives split over several tokens.
MARKER_WINDOW = 64


def make_tokenizer(tokenizer_json: str, vocab_size: int, eos: list[int]):
    """llguidance's tokenizer from a `tokenizers` JSON, sized to the model's logits."""
    llg = load_llguidance()
    return llg.LLTokenizer(tokenizer_json, n_vocab=vocab_size, eos_token=eos)


class ConstraintState:
    """One sequence's way through its plan, token by token; both engines drive it.

    `may_think` is (the think-start token, the think-end marker) of a model that may open
    its own think block (reasoning asked, the template did not open one): its first token
    may be that one instead of the grammar's, and then the grammar waits for the end.
    """

    def __init__(self, plan: Plan, tokenizer, may_think: tuple[int, bytes] | None = None):
        self._plan = plan
        self._tokenizer = tokenizer
        self._matcher = None
        self._tail = b""
        self._after = plan.after
        self._waiting = plan.after  # the marker that ends the free stretch, if any
        if self._waiting is None:
            self._waiting = plan.trigger
            if self._waiting is None:
                self._start()
        self._may_think = may_think if self._matcher is not None else None

    @property
    def extra_token(self) -> int | None:
        """A token allowed beside the grammar's next ones (the think-start token)."""
        return self._may_think[0] if self._may_think else None

    @property
    def matcher(self):
        """The grammar's matcher while it applies; None during free text."""
        return self._matcher

    def _start(self) -> None:
        llg = load_llguidance()
        self._matcher = llg.LLMatcher(self._tokenizer, self._plan.grammar, log_level=0)

    def advance(self, token: int) -> bool:
        """Take the next token; False when the grammar refuses it."""
        may_think, self._may_think = self._may_think, None
        if may_think and token == may_think[0]:  # it thinks first: the grammar waits
            self._matcher, self._after = None, may_think[1]
            self._waiting = self._after
            return True
        if self._matcher is None:
            return self._free(self._tokenizer.decode_bytes([token]))
        if not self._matcher.consume_token(token):
            return False
        if self._plan.repeat and self._matcher.is_stopped():
            self._matcher, self._waiting = None, self._plan.trigger
        return True

    def _free(self, data: bytes) -> bool:
        self._tail = (self._tail + data)[-MARKER_WINDOW:]
        at = self._tail.find(self._waiting)
        if at < 0:
            return True
        rest = self._tail[at + len(self._waiting) :]
        self._tail = b""
        if self._waiting == self._after and self._plan.trigger is not None:
            self._waiting = self._plan.trigger  # reasoning over: free answer text until a call
            return self._free(rest) if rest else True
        self._waiting = None
        self._start()
        # A marker can end inside a token: the rest of that token is the grammar's first text.
        if rest.strip():
            return self._matcher.consume_tokens(self._tokenizer.tokenize_bytes(rest.lstrip()))
        return True

    def accepting(self) -> bool:
        """Whether output that ends here satisfies the plan."""
        if self._matcher is None:
            return self._plan.trigger is not None  # free text, where free text may end
        return self._matcher.is_accepting()

    def error(self) -> str:
        return self._matcher.get_error() if self._matcher is not None else ""
