"""API keys as the control plane knows them: each key's label, models, priority and limits,
and what the request's key may use (set by the HTTP guard, read where a model name is
resolved). No HTTP here."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import NamedTuple

from engines.errors import Forbidden
from gateway.control.key_names import KeyNames
from schemas.config import ApiKey, KeyLimits, KeyPriority, ModelConfig, ServerConfig

# The model names the request's key may use; None when it may use every model. Set by the
# guard in the request's own task, read where a model name is resolved.
# What the admin key's requests are named by; no key's `label` may be it.
ADMIN_LABEL = "admin"
ALLOWED_MODELS: ContextVar[tuple[str, ...] | None] = ContextVar("allowed_models", default=None)
# The MCP servers the request's key may use (`mcp_servers:` of its entry); None: every one.
ALLOWED_MCP_SERVERS: ContextVar[tuple[str, ...] | None] = ContextVar("allowed_mcp", default=None)
# The key's `run_tools` (the gateway makes `tools_from` calls itself); None: as the model says.
KEY_RUN_TOOLS: ContextVar[bool | None] = ContextVar("key_run_tools", default=None)


class KeyEntry(NamedTuple):
    """One configured key as the guard uses it; `label` names it wherever the key may not."""

    secret: str
    label: str
    models: tuple[str, ...] | None  # None: every model
    priority: KeyPriority
    limits: KeyLimits
    mcp_servers: tuple[str, ...] | None = None  # None: every declared MCP server
    run_tools: bool | None = None  # None: as each model's `run_tools` says


def has_keys(server: ServerConfig) -> bool:
    """Whether any API key is configured (a key read from an unset ${VAR} is none)."""
    return any(entry.key if isinstance(entry, ApiKey) else entry for entry in server.api_keys)


def key_entries(server: ServerConfig, names: KeyNames) -> list[KeyEntry]:
    """Each configured key, with its label, models, priority and limits.

    The label is the entry's `label`, else the key's own name (`names`, a keyed hash of the
    key): never its place in the list, so what is kept under a label stays the key's when
    others come and go."""
    entries = []
    for entry in server.api_keys:
        if isinstance(entry, ApiKey):
            if entry.key:  # a key read from an unset ${VAR} is no key at all
                label = entry.label or names.label(entry.key)
                models = None if entry.models is None else tuple(entry.models)
                mcp = None if entry.mcp_servers is None else tuple(entry.mcp_servers)
                entries.append(
                    KeyEntry(
                        entry.key,
                        label,
                        models,
                        entry.priority,
                        entry.limits,
                        mcp,
                        entry.run_tools,
                    )
                )
        elif entry:
            entries.append(KeyEntry(entry, names.label(entry), None, KeyPriority(), KeyLimits()))
    return entries


def usable_models(
    models: list[ModelConfig], resolve_name: Callable[[str], str | None]
) -> list[ModelConfig]:
    """The models the request's key may use, for the listing routes (every one without keys)."""
    names = ALLOWED_MODELS.get()
    if names is None:
        return list(models)
    allowed = {resolve_name(n) for n in names}
    return [m for m in models if m.id in allowed]


def check_model_allowed(
    resolve_name: Callable[[str], str | None], requested: str, served: str
) -> None:
    """`Forbidden` when the request's key may not use the model `served` (asked as `requested`)."""
    names = ALLOWED_MODELS.get()
    if names is None:
        return
    allowed = {resolve_name(n) for n in names} - {None}
    if served not in allowed:
        listed = ", ".join(names) or "none"
        raise Forbidden(f"this API key may not use model {requested!r} (it may use: {listed})")


def visible_names(
    models: list[ModelConfig], resolve_name: Callable[[str], str | None]
) -> list[str]:
    """The ids and aliases the request's key may see (in "not found" messages, say)."""
    return sorted(n for m in usable_models(models, resolve_name) for n in (m.id, *m.aliases))


def check_mcp_allowed(name: str, where: str) -> None:
    """`Forbidden` when the request's key may not use the MCP server `name`."""
    names = ALLOWED_MCP_SERVERS.get()
    if names is not None and name not in names:
        listed = ", ".join(names) or "none"
        raise Forbidden(
            f"{where}: this API key may not use MCP server {name!r} (it may use: {listed})"
        )


def mcp_allowed(name: str) -> bool:
    names = ALLOWED_MCP_SERVERS.get()
    return names is None or name in names
