"""Who reads the ops views, for every ops route and every kind of caller: no key, a plain
key, a key limited to some models, a key limited to no models (`models: []`, the ops key)
and the admin key, with and without `server.admin_key`, and on a gateway without keys."""

from __future__ import annotations

import httpx
import pytest
from litestar import Router

from gateway.ops import admin, benchmark, controls, health, metrics, playground, ui, ui_api

PLAIN, LIMITED, OPS, ADMIN = (
    "sk-plain-1357913579",
    "sk-limited-2468024680",
    "sk-ops-9753197531",
    "adm-ops-8642086420",
)
ENV = {"TEST_PLAIN_KEY": PLAIN, "TEST_LIMITED_KEY": LIMITED, "TEST_OPS_KEY": OPS}
KEYS = """
  api_keys:
    - "${TEST_PLAIN_KEY}"
    - {key: "${TEST_LIMITED_KEY}", models: [echo]}
    - {key: "${TEST_OPS_KEY}", models: []}
"""
MODELS = """
models:
  - {id: echo, engine: scripted}
"""
CALLERS = {"none": None, "plain": PLAIN, "limited": LIMITED, "ops": OPS, "admin": ADMIN}
# (config, what each caller gets from an ops view)
CASES = {
    "keys and admin key": (
        "server:\n  admin_key: ${TEST_ADMIN_KEY}" + KEYS + MODELS,
        {"none": 401, "plain": 403, "limited": 403, "ops": 403, "admin": 200},
    ),
    # The README's ops key: where no admin key is set, a key limited to no models reads them.
    "keys, no admin key": (
        "server:" + KEYS + MODELS,
        {"none": 401, "plain": 403, "limited": 403, "ops": 200, "admin": 401},
    ),
    "no keys, admin key": (
        "server:\n  admin_key: ${TEST_ADMIN_KEY}" + MODELS,
        {"none": 401, "plain": 401, "limited": 401, "ops": 401, "admin": 200},
    ),
    # No key at all, on loopback: every caller is a peer on this machine, the admin.
    "no keys on loopback": (
        MODELS,
        {"none": 200, "plain": 200, "limited": 200, "ops": 200, "admin": 200},
    ),
}


def ops_routes() -> list[str]:
    """The GET path of every route marked as an ops view."""
    found = set()
    for module in (admin, benchmark, controls, health, metrics, playground, ui, ui_api):
        for handler in module.ROUTES:
            if not isinstance(handler, Router) and handler.opt.get("ops"):
                found.update(handler.paths)
    return sorted(found)


def status_of(gateway, path: str, key: str | None) -> int:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    # /ui/events is a stream that never ends: its status is all that is read.
    with httpx.stream("GET", f"{gateway.url}{path}", headers=headers, timeout=30) as answer:
        return answer.status_code


def test_the_ops_routes_are_those_the_matrix_covers():
    assert ops_routes() == ["/metrics", "/ui/events", "/ui/state"]


@pytest.mark.parametrize("case", CASES)
def test_each_caller_reads_the_ops_views_as_the_docs_say(start_gateway, case):
    config, expected = CASES[case]
    gateway = start_gateway(config, env={**ENV, "TEST_ADMIN_KEY": ADMIN})
    found = {
        (path, caller): status_of(gateway, path, key)
        for path in ops_routes()
        for caller, key in CALLERS.items()
    }
    wanted = {(path, caller): expected[caller] for path in ops_routes() for caller in CALLERS}
    assert found == wanted
