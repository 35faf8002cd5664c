"""Anthropic's names and model page: every chat model also answers to `claude-<id or alias>`."""

from __future__ import annotations

from gateway.canonical.model_facts import task_of
from gateway.control.registry import Generation, Route
from schemas import anthropic as wire

# Claude Code only offers models whose names look like Claude's: every chat model also
# answers to `claude-<id or alias>`.
CLAUDE_PREFIX = "claude-"

# Anthropic's convention for a model whose release date is unknown: the epoch.
UNKNOWN_DATE = "1970-01-01T00:00:00Z"


def resolve(generation: Generation, name: str) -> Route:
    """A model id or alias; else `claude-<id or alias>`; else the fallback, else 404."""
    if not _known(generation, name) and name.startswith(CLAUDE_PREFIX):
        bare = name.removeprefix(CLAUDE_PREFIX)
        if _known(generation, bare):
            return generation.resolve(bare)._replace(requested=name, alias=name)
    return generation.resolve(name)


def _known(generation: Generation, name: str) -> bool:
    return any(name == m.id or name in m.aliases for m in generation.config.models)


def model_page(generation: Generation) -> wire.ModelPage:
    """The model list in Anthropic's shape: each chat model and alias, and its `claude-` name."""
    cards = []
    for model in generation.listed():
        if task_of(generation, model) != "chat":  # embedding and reranking models
            continue
        for name in (model.id, *model.aliases):
            claude = name if name.startswith(CLAUDE_PREFIX) else CLAUDE_PREFIX + name
            for shown in dict.fromkeys((name, claude)):
                cards.append(wire.ModelInfo(id=shown, display_name=name, created_at=UNKNOWN_DATE))
    return wire.ModelPage(
        data=cards,
        first_id=cards[0].id if cards else None,
        last_id=cards[-1].id if cards else None,
    )
