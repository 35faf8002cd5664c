"""The one table of model keys (`MODEL_KEYS`): for every key of `ModelConfig` but `id`, the
engines and the kinds of model it applies to, the keys it conflicts with, the engines that
require it, and whether changing it on reload needs a new runner. Read by the config's check
(gateway/control/config.py), `defaults:` merging, reload, the engines that find a model's
task at load (engines/compat.py) and the config reference (`gateway docs`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple, get_args

import msgspec

from schemas.config import EngineKind, ModelConfig

# The kinds of model a key may apply to, as each is named in errors: `chat` (a text model),
# `vision` (a chat model whose checkpoint has a vision tower: found at load, never declared),
# `embed` (`task: embed`, or an embedding architecture found at load) and `rerank` (`task:
# rerank`, or a cross-encoder's architecture found at load) and `transcribe` (`task:
# transcribe`, or a Whisper checkpoint found at load) and `speech` (`task: speech`, or a
# Kokoro checkpoint found at load).
TASKS = {
    "chat": "an MLX text model",
    "vision": "a vision model",
    "embed": "an embedding model",
    "rerank": "a reranking model",
    "transcribe": "a speech-to-text model",
    "speech": "a text-to-speech model",
}


class KeyRule(NamedTuple):
    """What one model key means beyond its type: the engines it applies to (a model of any
    other engine is refused it by name), whether changing it on reload needs a new runner
    (else the running one is retuned in place), the engines `defaults:` give it to, the
    kinds of model (`TASKS`) it applies to, and the keys it cannot be set beside."""

    engines: frozenset[str]
    restart: bool
    defaults_to: frozenset[str] | None = None  # None: `engines`
    # A model of another task is refused it: by name at `check` where `task:` says so, at
    # load where the checkpoint tells (`why_task` is the check's error); `defaults:` skip it.
    tasks: frozenset[str] = frozenset(TASKS)
    why_task: str = ""
    # Another key -> why the two cannot both be set; the error names this key.
    conflicts: Mapping[str, str] = MappingProxyType({})
    # The engines a model of which must set it (an engine's own section, mlx's source).
    required_by: frozenset[str] = frozenset()

    @property
    def from_defaults(self) -> frozenset[str]:
        return self.engines if self.defaults_to is None else self.defaults_to


ENGINES = frozenset(get_args(EngineKind))
# Engines whose weights the gateway holds itself; the others reach a server that holds them.
LOCAL = frozenset({"mlx", "scripted"})
MLX = frozenset({"mlx"})
UPSTREAM = frozenset({"upstream"})
PROCESS = frozenset({"process"})
TEXT = frozenset({"chat"})  # text generation without images: the MLX text engine's own keys
CHATS = frozenset({"chat", "vision"})  # every model that answers chat, images or not
# Why a key is refused beside `distributed:`.
_SHARDED = (
    "does not apply to a distributed model (its ranks are processes of their own, each "
    "holding part of the weights)"
)

# Every key of `ModelConfig` but `id`, in its order. `restart`: the engine is built from it
# (a new runner, a new load); the others are read per request or per admission. Which engines
# and tasks each applies to, and what it conflicts with, is read by the config's check
# (gateway/control/config.py), `defaults:` merging, and the engines that find a model's task
# at load (engines/compat.py).
MODEL_KEYS: dict[str, KeyRule] = {
    "engine": KeyRule(ENGINES, restart=True),
    "source": KeyRule(LOCAL, restart=True, required_by=MLX),
    "aliases": KeyRule(ENGINES, restart=False),
    "residency": KeyRule(ENGINES, restart=False),
    "context": KeyRule(LOCAL, restart=True),
    # A remote model's own comes from its replicas' capacity when it sets none.
    "concurrency": KeyRule(ENGINES, restart=True, defaults_to=LOCAL),
    "prefix_reuse": KeyRule(LOCAL, restart=True),
    "session_slots": KeyRule(LOCAL, restart=True),
    "kv_bits": KeyRule(LOCAL, restart=True),
    "disk_cache": KeyRule(MLX, restart=True),
    "weights": KeyRule(LOCAL, restart=True),
    "experts": KeyRule(
        MLX,
        restart=True,
        tasks=TEXT,
        why_task="`experts` applies to MLX text models (a mixture of experts)",
        conflicts={"distributed": f"`experts` {_SHARDED}"},
    ),
    "isolation": KeyRule(
        MLX,
        restart=True,
        tasks=TEXT,
        why_task="`isolation: process` applies to MLX text models only; remove it from this model",
        conflicts={"distributed": f"`isolation` {_SHARDED}"},
    ),
    "draft": KeyRule(LOCAL, restart=True, conflicts={"distributed": f"a draft model {_SHARDED}"}),
    "speculation": KeyRule(
        MLX,
        restart=True,
        tasks=TEXT,
        why_task="`speculation` applies to text generation; an embedding model generates nothing",
        conflicts={
            "draft": "`speculation` with `draft`: a model drafts either with a draft model or "
            "by prompt lookup: remove one",
            "kv_bits": "`speculation` with `kv_bits`: a quantized KV cache decodes on mlx-lm's "
            "single-stream loop, which has no prompt-lookup drafts: remove one",
            "distributed": f"`speculation` (not verified across ranks) {_SHARDED}",
        },
    ),
    "system": KeyRule(ENGINES, restart=False),
    "guardrails": KeyRule(ENGINES, restart=False),
    "sampling": KeyRule(ENGINES, restart=False),
    "reasoning": KeyRule(ENGINES, restart=False),
    "tool_parser": KeyRule(LOCAL, restart=True),
    "rate": KeyRule(ENGINES, restart=True),
    "stream_interval": KeyRule(LOCAL, restart=False),
    "task": KeyRule(LOCAL, restart=True),
    "queue": KeyRule(ENGINES, restart=False),
    "capture": KeyRule(ENGINES, restart=False),
    "tools_from": KeyRule(
        ENGINES,
        restart=False,
        tasks=CHATS,
        why_task="`tools_from` offers tools to a chat model",
    ),
    "run_tools": KeyRule(
        ENGINES,
        restart=False,
        tasks=CHATS,
        why_task="`run_tools` runs a chat model's tool calls",
    ),
    "script": KeyRule(LOCAL, restart=True),
    "hf_token": KeyRule(LOCAL, restart=True),
    "vision": KeyRule(ENGINES, restart=True),
    # An engine's own section. `defaults:` give it to every model, as they always have: a
    # model of another engine is then refused it by name.
    "upstream": KeyRule(UPSTREAM, restart=True, defaults_to=ENGINES, required_by=UPSTREAM),
    "process": KeyRule(PROCESS, restart=True, defaults_to=ENGINES, required_by=PROCESS),
    "distributed": KeyRule(
        MLX, restart=True, tasks=TEXT, why_task="a distributed model serves chat only"
    ),
    # Applied by the running base on reload (gateway/control/reload.py): only a model's
    # first adapters (or its last removed) need a new runner.
    "adapters": KeyRule(
        MLX,
        restart=False,
        tasks=TEXT,
        why_task="`adapters` apply to MLX text models only",
        conflicts={
            "kv_bits": "`adapters` with `kv_bits`: a quantized KV cache decodes on mlx-lm's "
            "single-stream loop, which applies no adapter per row: remove one",
            "draft": "`adapters` with `draft`: drafts are not verified per adapter: remove one",
            "speculation": "`adapters` with `speculation`: drafts are not verified per "
            "adapter: remove one",
            "isolation": "`adapters` with `isolation: process`: not yet: remove one",
            "distributed": f"`adapters` {_SHARDED}",
        },
    ),
    # The vector is added by the loaded model's decoder layers: a new one is a new load.
    "steering": KeyRule(
        MLX,
        restart=True,
        tasks=TEXT,
        why_task="`steering` applies to MLX text models only",
        conflicts={
            "isolation": "`steering` with `isolation: process`: not yet: remove one",
            "distributed": f"`steering` {_SHARDED}",
        },
    ),
}

if list(MODEL_KEYS) != [f.name for f in msgspec.structs.fields(ModelConfig) if f.name != "id"]:
    raise TypeError("MODEL_KEYS must list every ModelConfig key but `id`, in its order")
