"""One Activity row per request, folded from the request's own event lines.

Pure functions over parsed JSON lines: the store (store.py) feeds them in order and
writes the rows. `generated` is read generically: the fields named here become columns, and
every other number or word it carries (cache tiers `ram`/`disk`, `drafted_tokens`,
`accepted_tokens`, `replica`, images, …) lands in the row's `detail`, summed across a
request's generations, so fields added to the event later show without a change here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

# Paths whose requests are Activity rows: the protocols' routes. The page's own polling,
# /health and /metrics would drown them.
PROTOCOL_PREFIXES = {
    "/rerank": "rerank",
    "/v1/rerank": "rerank",
    "/v2/rerank": "rerank",
    "/v1/messages": "anthropic",
    "/v1/": "openai",
    "/api/": "ollama",
    "/ui/api/playground/": "openai",  # the page's playground: /v1 handlers, admin key too
}
# What the store's `key_label()` answers for a request that is no row: one that presents no
# key the config knows on a gateway with keys, refused (401) before anything else. Anyone may
# send those by the thousand; as rows they would push every tenant's out of `max_rows`
# (`/metrics` counts them: `gateway_requests_total{model="",status="401"}`).
NO_ROW = "\x00no row"
# `generated` fields with a column of their own (or folded into one).
GENERATED_COLUMNS = {
    "event", "ts", "level", "request_id", "model", "prompt_tokens", "new_tokens",
    "prefill_s", "decode_s", "queue_wait_s", "ttft_s", "stop_reason", "reused_prefix_tokens",
}  # fmt: skip
COLUMNS = (
    "request_id", "ts", "key", "method", "path", "protocol", "requested", "model", "stream",
    "status", "prompt_tokens", "cached_tokens", "new_tokens", "ttft_s", "prefill_s",
    "decode_s", "queue_wait_s", "duration_ms", "finish", "guardrail", "error", "detail",
)  # fmt: skip


def epoch(ts: str | None) -> float:
    """Seconds since the epoch of an event's ISO `ts` (now-ish when absent)."""
    if not ts:
        return datetime.now().timestamp()
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def protocol_of(path: str) -> str | None:
    """The protocol a path speaks, or None for a path that is no protocol's (not a row)."""
    for prefix, protocol in PROTOCOL_PREFIXES.items():
        if path.startswith(prefix):
            return protocol
    return None


def new_row(event: dict[str, Any], key: str | None) -> dict[str, Any] | None:
    """The row a `request_started` line opens, or None when its path is not a protocol's
    or the request is refused for want of a key (`NO_ROW`)."""
    protocol = protocol_of(event.get("path", ""))
    if protocol is None or key == NO_ROW:
        return None
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(
        request_id=event.get("request_id"),
        ts=epoch(event.get("ts")),
        key=key,
        method=event.get("method"),
        path=event.get("path"),
        protocol=protocol,
        detail={},
    )
    return row


def fold(row: dict[str, Any], event: dict[str, Any]) -> None:
    """Fold one of the request's events into its row."""
    match event.get("event"):
        case "request_routed":
            row["requested"] = event.get("requested")
            row["model"] = event.get("served")
            row["stream"] = event.get("stream")
            row["protocol"] = event.get("protocol") or row["protocol"]
        case "generated":
            _fold_generated(row, event)
        case "guardrail":
            actions = [a for a in (row["guardrail"] or "").split(",") if a]
            row["guardrail"] = ",".join([*actions, str(event.get("action"))])
        case "tool_called":
            # The gateway's MCP tool loop (docs/mcp.md): how many calls, which, how many failed.
            detail = row["detail"]
            detail["tool_calls"] = detail.get("tool_calls", 0) + 1
            detail["tool_errors"] = detail.get("tool_errors", 0) + bool(event.get("error"))
            tool = f"{event.get('server')}.{event.get('tool')}"
            named = [t for t in str(detail.get("tools", "")).split(",") if t]
            detail["tools"] = ",".join(named if tool in named else [*named, tool])
        case "request_finished":
            row["status"] = event.get("status")
            row["duration_ms"] = event.get("duration_ms")
            row["error"] = event.get("error")
    # A key label some event carries (per-key limits label their requests) wins over ours.
    if isinstance(label := event.get("key_label"), str):
        row["key"] = label


def _fold_generated(row: dict[str, Any], event: dict[str, Any]) -> None:
    row["model"] = row["model"] or event.get("model")
    for column, field in (
        ("prompt_tokens", "prompt_tokens"),
        ("new_tokens", "new_tokens"),
        ("cached_tokens", "reused_prefix_tokens"),
        ("prefill_s", "prefill_s"),
        ("decode_s", "decode_s"),
    ):
        if isinstance(value := event.get(field), int | float):
            row[column] = (row[column] or 0) + value
    for column in ("ttft_s", "queue_wait_s"):  # the first answer's, for a request of n
        if row[column] is None:
            row[column] = event.get(column)
    row["finish"] = event.get("stop_reason") or row["finish"]
    detail = row["detail"]
    for field, value in event.items():
        if field in GENERATED_COLUMNS or value in (None, 0, False, ""):
            continue  # what did not happen (no images, no eviction) says nothing
        if isinstance(value, int | float) and not isinstance(value, bool):
            detail[field] = detail.get(field, 0) + value
        elif isinstance(value, str | bool):
            detail[field] = value


def rates(row: dict[str, Any]) -> dict[str, Any]:
    """The row as the routes answer it: prefill (of the tokens not served from a cache)
    and decode tokens/s worked out."""
    prefill, decode = row.get("prefill_s"), row.get("decode_s")
    computed = (row.get("prompt_tokens") or 0) - (row.get("cached_tokens") or 0)
    row["prefill_tps"] = _per_s(computed, prefill)
    row["decode_tps"] = _per_s(row.get("new_tokens"), decode)
    return row


def _per_s(tokens: int | None, seconds: float | None) -> float | None:
    if not tokens or not seconds:
        return None
    return round(tokens / seconds, 2)
