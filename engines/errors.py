"""The one exception tree. Each error carries the status a protocol should answer with."""

from __future__ import annotations


class GatewayError(Exception):
    status: int = 500
    kind: str = "server_error"
    retry_after: float | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(GatewayError):
    status = 400
    kind = "invalid_request_error"


class ModelNotFound(GatewayError):
    status = 404
    kind = "not_found_error"


class QueueFull(GatewayError):
    status = 429
    kind = "rate_limit_error"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueTimeout(QueueFull):
    """Waited in the queue past `queue.max_wait`."""

    status = 503
    kind = "overloaded_error"


class ModelUnavailable(GatewayError):
    """The model failed to load, or is detaching."""

    status = 503
    kind = "overloaded_error"


class SourceError(GatewayError):
    """A model source that is missing, unreadable or corrupt. Names the model and the path."""

    def __init__(self, model_id: str, path: str, reason: str) -> None:
        super().__init__(f"model {model_id!r}: source {path}: {reason}")
        self.model_id = model_id
        self.path = path
        self.reason = reason


class ConfigInvalid(GatewayError):
    """A config file that fails validation; `errors` holds every problem found."""

    status = 400

    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid config:\n" + "\n".join(errors))
        self.errors = errors


class ContextOverflow(BadRequest):
    """A prompt that does not fit the model's context window."""

    def __init__(self, model_id: str, prompt_tokens: int, window: int) -> None:
        super().__init__(
            f"model {model_id!r}: the prompt has {prompt_tokens} tokens and the context "
            f"window is {window} (context.max); shorten the conversation"
        )
        self.prompt_tokens = prompt_tokens
        self.window = window


class ModelBusy(GatewayError):
    """An admin action that needs an idle model, asked of a busy one."""

    status = 409
    kind = "conflict"
