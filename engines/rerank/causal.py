"""The LLM-style reranker: a causal language model asked whether the document answers the
query, scored by its "yes" against its "no" (Qwen3-Reranker's recipe).

Each document becomes one prompt, Qwen3-Reranker's own template:

    <|im_start|>system\\nJudge whether the Document meets ... "yes" or "no".<|im_end|>\\n
    <|im_start|>user\\n<Instruct>: {instruction}\\n<Query>: {query}\\n<Document>: {document}
    <|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n

and its score is P(yes) over the two answers at the last position: the softmax of the
logits of the tokens "yes" and "no" there. A prompt past the window loses the end of its
middle part (the document's end first, then the query's), as the model's reference code cuts
it; the template's head and tail are always kept. Prompts are right-padded into batches:
under a causal mask a position never sees the padding after it, so each prompt's last real
position reads exactly what it would alone, and only those positions go through the head.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from engines.errors import SourceError
from engines.mlx.bert import DEFAULT_BATCH_TOKENS, padded_batches
from engines.mlx.load import hold, platform_holding
from engines.platform import PlatformPath

PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n"
)
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
# The window when `context.max` is auto: a reranker's prompt is one query and one passage.
DEFAULT_WINDOW = 8192


def is_causal(config: dict) -> bool:
    """Whether config.json describes a causal language model (an LLM-style reranker)."""
    return any(a.endswith("ForCausalLM") for a in config.get("architectures") or [])


def body(query: str, document: str) -> str:
    return f"<Instruct>: {INSTRUCTION}\n<Query>: {query}\n<Document>: {document}"


class CausalScorer:
    """A causal LM's P(yes) for each (query, document) prompt, batched."""

    def __init__(
        self, model_id: str, path: Path, platform: PlatformPath | None, window: int | None
    ) -> None:
        import mlx.core as mx
        from mlx_lm.utils import load_model

        try:
            model, config = load_model(path)
        except Exception as error:  # mlx-lm raises anything on a checkpoint it cannot read
            raise SourceError(model_id, str(path), f"mlx-lm cannot load it: {error}") from None
        if platform is not None:
            hold(model, platform_holding(model, platform))
        mx.eval(model.parameters())
        file = path / "tokenizer.json"
        if not file.is_file():
            raise SourceError(model_id, str(file), "not found (a reranking model needs it)")
        tokenizer = Tokenizer.from_file(str(file))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.answers = [tokenizer.token_to_id(word) for word in ("no", "yes")]
        if None in self.answers:
            raise SourceError(model_id, str(file), 'an LLM reranker needs "yes" and "no" tokens')
        self.model, self.tokenizer = model, tokenizer
        self.window = window or min(config.get("max_position_embeddings") or 0, DEFAULT_WINDOW)
        self._prefix = self._ids(PREFIX)
        self._suffix = self._ids(SUFFIX)
        if len(self._prefix) + len(self._suffix) >= self.window:
            raise SourceError(model_id, str(path), f"a window of {self.window} holds no prompt")

    def prompt(self, query: str, document: str) -> list[int]:
        """The prompt's ids, its middle cut to fit the window."""
        room = self.window - len(self._prefix) - len(self._suffix)
        return self._prefix + self._ids(body(query, document))[:room] + self._suffix

    def score(self, query: str, documents: list[str]) -> tuple[list[float], int]:
        """P(yes) per document, in order, and the tokens read."""
        import mlx.core as mx

        ids = [self.prompt(query, d) for d in documents]
        scores = [0.0] * len(ids)
        answers = mx.array(self.answers)
        for batch in padded_batches(ids, DEFAULT_BATCH_TOKENS):
            length = max(len(ids[i]) for i in batch)
            tokens = mx.array([ids[i] + [0] * (length - len(ids[i])) for i in batch])
            states = self.model.model(tokens)  # hidden states, normed; causal mask
            last = states[mx.arange(len(batch)), mx.array([len(ids[i]) - 1 for i in batch])]
            logits = self._head(last)[:, answers]
            yes = mx.softmax(logits.astype(mx.float32), axis=-1)[:, 1]
            for i, score in zip(batch, yes.tolist(), strict=True):
                scores[i] = score
        return scores, sum(len(x) for x in ids)

    def count(self, text: str) -> int:
        return len(self._ids(text))

    def _head(self, states):
        """The model's output projection (its own, or the tied embedding's)."""
        if getattr(self.model, "lm_head", None) is not None:
            return self.model.lm_head(states)
        return self.model.model.embed_tokens.as_linear(states)

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids
