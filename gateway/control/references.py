"""The config's cross-field references: model ids and aliases unique, and every name that
points at a model (the fallback, a draft model, an API key's models) naming one; API key
entries' labels unique and their priorities within their ceilings; image-fetch networks
that parse."""

from __future__ import annotations

import ipaddress
from typing import Any

from gateway.control.keys import ADMIN_LABEL
from gateway.control.yaml_source import KeyPath, Source


def check_references(server: Any, models: list[Any], src: Source) -> None:
    """Ids and aliases unique; fallback, draft and key entries name a model (by id or
    alias; a draft's alias is then resolved: `resolve_drafts`)."""
    owner: dict[str, tuple[str, KeyPath]] = {}  # id or alias -> (model id, where)
    for i, model in enumerate(models):
        mid = model.get("id") if isinstance(model, dict) else None
        if not isinstance(mid, str):
            continue
        if mid in owner:
            line = src.values[src.source_of(owner[mid][1])].line + 1
            src.at(("models", i, "id"), f"duplicate model id {mid!r} (first at line {line})")
        owner.setdefault(mid, (mid, ("models", i, "id")))
    ids = set(owner)
    for i, model in enumerate(models):
        mid = model.get("id") if isinstance(model, dict) else None
        if not isinstance(mid, str):
            continue
        aliases = model.get("aliases")
        for j, alias in enumerate(aliases if isinstance(aliases, list) else []):
            if not isinstance(alias, str):
                continue
            where = ("models", i, "aliases", j)
            if alias == mid:
                src.at(where, f"model {mid!r}: alias {alias!r} is the model's own id")
            elif alias in ids:
                src.at(where, f"model {mid!r}: alias {alias!r} is the id of another model")
            elif alias in owner:
                other = owner[alias][0]
                what = "listed twice" if other == mid else f"already an alias of model {other!r}"
                src.at(where, f"model {mid!r}: alias {alias!r} is {what}")
            else:
                owner[alias] = (mid, where)
        vision = model.get("vision")
        if isinstance(vision, dict):
            low, high = vision.get("min_pixels"), vision.get("max_pixels")
            if isinstance(low, int) and isinstance(high, int) and low > high:
                src.at(
                    ("models", i, "vision", "min_pixels"),
                    f"model {mid!r}: min_pixels {low} is more than max_pixels {high}",
                )
    for i, model in enumerate(models):
        draft = model.get("draft") if isinstance(model, dict) else None
        target = draft.get("model") if isinstance(draft, dict) else None
        if isinstance(target, str) and isinstance(mid := model.get("id"), str):
            where = ("models", i, "draft", "model")
            if target not in owner:
                src.at(where, f"model {mid!r}: draft model {target!r} names no model")
            elif owner[target][0] == mid:
                src.at(where, f"model {mid!r}: draft model {target!r} is the model itself")
    fallback = server.get("fallback") if isinstance(server, dict) else None
    if isinstance(fallback, str) and fallback not in owner:
        known = ", ".join(sorted(owner)) or "none"
        src.at(("server", "fallback"), f"{fallback!r} names no model id or alias (known: {known})")
    keys = server.get("api_keys") if isinstance(server, dict) else None
    for i, entry in enumerate(keys if isinstance(keys, list) else []):
        names = entry.get("models") if isinstance(entry, dict) else None
        for j, name in enumerate(names if isinstance(names, list) else []):
            if isinstance(name, str) and name not in owner:
                known = ", ".join(sorted(owner)) or "none"
                where = ("server", "api_keys", i, "models", j)
                src.at(where, f"{name!r} names no model id or alias (known: {known})")
    check_key_entries(keys if isinstance(keys, list) else [], src)
    allow = server.get("fetch_images_allow") if isinstance(server, dict) else None
    for i, network in enumerate(allow if isinstance(allow, list) else []):
        try:
            ipaddress.ip_network(network, strict=False)
        except (TypeError, ValueError):
            src.at(("server", "fetch_images_allow", i), f"{network!r} is not an IP network")


def resolve_drafts(models: list[Any]) -> None:
    """Every `draft.model` that names a model by an alias, set to that model's id: the
    runner finds its draft by id (checked by `check_references`: each names a model)."""
    ids = {alias: m["id"] for m in models for alias in m.get("aliases") or []}
    for model in models:
        draft = model.get("draft")
        if isinstance(draft, dict) and draft.get("model") in ids:
            model["draft"] = {**draft, "model": ids[draft["model"]]}


def check_key_entries(keys: list[Any], src: Source) -> None:
    """Labels unique (events and metrics name keys by them) and none `admin` (the admin
    key's, whose Activity rows a key so named would read); a default priority within the
    key's ceiling."""
    seen: dict[str, int] = {}
    for i, entry in enumerate(keys):
        if not isinstance(entry, dict):
            continue
        label = entry.get("label")
        if isinstance(label, str):
            if label.lower() == ADMIN_LABEL:
                src.at(
                    ("server", "api_keys", i, "label"),
                    f"the label {label!r} is reserved for the admin key (server.admin_key)",
                )
            elif label in seen:
                src.at(
                    ("server", "api_keys", i, "label"),
                    f"duplicate key label {label!r} (also api_keys[{seen[label]}])",
                )
            seen.setdefault(label, i)
        priority = entry.get("priority")
        if isinstance(priority, dict):
            default, ceiling = priority.get("default", 0), priority.get("max", 0)
            if isinstance(default, int) and isinstance(ceiling, int) and default > ceiling:
                src.at(
                    ("server", "api_keys", i, "priority", "default"),
                    f"priority.default {default} is above priority.max {ceiling}",
                )
