"""The one exception tree of the gateway, drawn once here.

Each error says what went wrong in domain terms and carries the facts a client needs (a
message, a retry delay); none knows HTTP. `gateway/http/errors.py` maps each class to a status
and renders it in each protocol's envelope, in one place.

    GatewayError
    ├── BadRequest              the request cannot be served as asked
    │   └── ContextOverflow     the prompt does not fit the context window
    ├── Unauthorized            no key, or a key the gateway does not know
    ├── Forbidden               a key not allowed this model or route
    ├── PayloadTooLarge         a body past `limits.max_body_bytes`
    ├── BodyTimeout             a body that stopped coming, or came too slowly (`limits.body_*`)
    ├── UnsupportedMediaType    a JSON route's body not declared JSON
    ├── ModelNotFound           a name no model or alias answers to
    ├── StoreUnavailable        the Responses store cannot be read or written
    ├── NotCancellable          a cancel of what has already ended (a batch)
    ├── ModelBusy               an admin action that needs an idle model
    ├── QueueFull               the model's queue is at `queue.max_depth`
    │   └── QueueTimeout        waited past `queue.max_wait`
    ├── RateLimited             a key past one of its limits (rpm, tpm, concurrent, budget)
    ├── ModelUnavailable        failed to load, or detaching
    ├── EngineFailed            the engine raised while generating (a batch step)
    ├── ToolCallRefused         the model's tool call failed its guardrails
    ├── ConstraintViolated      a script with no reply its request's constraint allows
    ├── DownloadFailed          a Hub download asked for now (a pull) failed
    ├── UpstreamError           a model's upstream answered wrongly (engine upstream)
    ├── UpstreamUnavailable     no replica of a model's upstream could take the request
    ├── UpstreamTimeout         a model's upstream did not answer in time
    ├── ClientGone              the client left before its answer
    ├── ConfigInvalid           a config file that fails validation
    └── SourceError             a model source missing, unreadable or corrupt
        ├── GGUFFormatError     a GGUF file MLX cannot read safely
        ├── ContextTooLarge     a context window whose KV cache cannot fit
        └── NotCached           an hf: source not downloaded yet (engines.sources.hub)
"""

from __future__ import annotations

from typing import NamedTuple


class GatewayError(Exception):
    retry_after: float | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(GatewayError):
    pass


class DimensionsUnavailable(BadRequest):
    """`dimensions` asked of an embedding model whose vectors have another size."""

    def __init__(self, model: str, size: int) -> None:
        super().__init__(
            f"$.dimensions: model {model!r} makes {size}-dimensional vectors "
            f"and cannot shorten them; omit dimensions or send {size}"
        )


class ContextOverflow(BadRequest):
    """A prompt that does not fit the model's context window."""

    def __init__(
        self, model_id: str, prompt_tokens: int, window: int, setting: str = "context.max"
    ) -> None:
        # `setting` names what set the window: the model's `context.max`, or the request's
        # own (Ollama's `options.num_ctx`), so the client knows which one to raise.
        super().__init__(
            f"model {model_id!r}: the prompt has {prompt_tokens} tokens and the context "
            f"window is {window} ({setting}); shorten the conversation"
        )
        self.model_id = model_id
        self.prompt_tokens = prompt_tokens
        self.window = window
        self.setting = setting
        self.parts: tuple[int, int, int] | None = None  # (tools declared, their tokens, system)

    def explain(self, tool_count: int, tool_tokens: int, system_tokens: int) -> None:
        """Say what the prompt is made of (see `engines/policy/overflow.py`)."""
        self.parts = (tool_count, tool_tokens, system_tokens)
        rest = max(0, self.prompt_tokens - tool_tokens - system_tokens)
        larger = (
            "give the model a larger context.max"
            if self.setting == "context.max"
            else f"send a larger {self.setting}"
        )
        self.message = (
            f"model {self.model_id!r}: the prompt has {self.prompt_tokens} tokens and the "
            f"context window is {self.window} ({self.setting}): the {tool_count} tools' "
            f"definitions take {tool_tokens} tokens, the system prompt {system_tokens}, "
            f"the messages {rest}; "
            + (
                f"declare fewer tools, shorten the system prompt or the conversation, or {larger}"
                if tool_tokens + system_tokens > rest
                else f"shorten the conversation, or {larger}"
            )
        )


class Unauthorized(GatewayError):
    pass


class Forbidden(GatewayError):
    pass


class PayloadTooLarge(GatewayError):
    pass


class BodyTimeout(GatewayError):
    """No part of the request body came within `limits.body_timeout`, or not all of it
    within `limits.body_deadline`."""


class UnsupportedMediaType(GatewayError):
    """A body sent as something other than JSON (a form, text/plain) to a JSON route."""


class ModelNotFound(GatewayError):
    pass


class StoredNotFound(GatewayError):
    """A stored object (a Response, an item) that does not exist for the asking API key."""


class StoreUnavailable(GatewayError):
    """The stored Responses' database cannot be opened, read or written (the message names
    the file): a fault of the host, said before any generation where it can be."""


class NotCancellable(GatewayError):
    """A cancel asked of what has already ended (a batch completed, failed or expired)."""


class ModelBusy(GatewayError):
    """An admin action that needs an idle model, asked of a busy one."""


class QueueFull(GatewayError):
    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueTimeout(QueueFull):
    """Waited in the queue past `queue.max_wait`."""


class Allowance(NamedTuple):
    """One limit as a client's rate-limit headers tell it: its size, what is left of it,
    and the seconds until it is whole again."""

    limit: int
    remaining: int
    reset_s: float


class RateLimited(GatewayError):
    """A key past one of its limits (`server.api_keys[].limits`): `limit` names which."""

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        retry_after: float,
        requests: Allowance | None = None,
        tokens: Allowance | None = None,
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after = retry_after
        self.requests = requests
        self.tokens = tokens


class ModelUnavailable(GatewayError):
    """The model failed to load, or is detaching."""


class EngineFailed(GatewayError):
    """The engine raised while generating: a fault of the gateway or the model, not the
    request. The message names the exception's type only; its traceback goes to the log."""

    def __init__(self, model_id: str, error: BaseException) -> None:
        super().__init__(
            f"model {model_id!r} failed while generating ({type(error).__name__}); "
            "the request was stopped, and the model serves the next ones"
        )


class ToolCallRefused(GatewayError):
    """The model's tool call failed its checks and the policy allows no (further) repair:
    the model behind the gateway answered wrongly, not the client."""


class ConstraintViolated(GatewayError):
    """A scripted model with no reply that the request's constraint allows (a real model is
    masked, so never writes one): `script.constrained` holds none that fits, or the grammar
    has no short instance. The script's fault, and the same script fails again."""


class DownloadFailed(GatewayError):
    """A Hugging Face Hub download asked for now (a pull) failed: network, gated, not found,
    disk full. The server behind the gateway failed, not the client."""


class ClientGone(GatewayError):
    """The client disconnected before its answer was ready (logged as 499)."""


class ConfigInvalid(GatewayError):
    """A config file that fails validation; `errors` holds every problem found."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid config:\n" + "\n".join(errors))
        self.errors = errors


class SourceError(GatewayError):
    """A model source that is missing, unreadable or corrupt. Names the model and the path."""

    def __init__(self, model_id: str, path: str, reason: str) -> None:
        super().__init__(f"model {model_id!r}: source {path}: {reason}")
        self.model_id = model_id
        self.path = path
        self.reason = reason


class ContextTooLarge(SourceError):
    """A `context.max` whose KV cache cannot fit the memory left after the weights."""


class GGUFFormatError(SourceError):
    """The file is not a GGUF that MLX can read safely; the message is the reason. Raised
    by the header check, which knows the file but not the model that named it."""

    def __init__(self, reason: str) -> None:
        GatewayError.__init__(self, reason)
        self.model_id, self.path, self.reason = "", "", reason


class UpstreamError(GatewayError):
    """A model's upstream server answered wrongly: an error status, a broken stream."""


class UpstreamUnavailable(GatewayError):
    """No replica of a model's upstream could take the request (all down, or unreachable)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class McpServerUnavailable(GatewayError):
    """A declared MCP server could not be started, reached or listed (gateway/mcp)."""


class UpstreamTimeout(GatewayError):
    """A model's upstream did not answer, or stopped answering, within `timeout`."""
