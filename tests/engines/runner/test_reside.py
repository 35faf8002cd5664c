"""Residency is asked of the runner (`Runner.reside`), never written into it: a request's
keep-alive, its load or unload (Ollama's empty request), the ops page's pin and unpin."""

from __future__ import annotations

import math

import pytest

from engines.base import EngineState
from engines.errors import BadRequest
from engines.runner import Runner
from engines.runner.keep import KeepAlive, Pin, Unpin
from engines.scripted import ScriptedEngine
from schemas.config import ModelConfig, OnDemand, ScriptConfig


def runner_of(residency) -> Runner:
    model = ModelConfig(id="m", engine="scripted", residency=residency)
    return Runner(model, ScriptedEngine(ScriptConfig(reply="hi")))


async def test_a_keep_alive_sets_an_on_demand_models_idle_time_and_loads_or_unloads_now():
    runner = runner_of(OnDemand(idle_ttl="10m"))
    runner.bind()
    assert not await runner.reside(KeepAlive(30.0))
    assert runner.keep_alive == 30.0 and runner.idle_ttl() == 30.0
    assert runner.state is EngineState.UNLOADED  # only asked how long, not to load
    assert not await runner.reside(KeepAlive(30.0, now=True))
    assert runner.state is EngineState.READY
    assert await runner.reside(KeepAlive(0, now=True))  # `ollama stop`
    assert runner.state is EngineState.UNLOADED
    assert not await runner.reside(KeepAlive(None))
    assert runner.keep_alive is None and runner.idle_ttl() == 600
    await runner.stop("test")


async def test_a_pinned_model_keeps_its_pin_whatever_a_request_asks():
    runner = runner_of("pinned")
    await runner.start()
    assert not await runner.reside(KeepAlive(0, now=True))
    assert runner.keep_alive is None and runner.state is EngineState.READY
    with pytest.raises(BadRequest, match="pinned in models.yaml"):
        await runner.reside(Unpin())
    await runner.stop("test")


async def test_the_pages_pin_loads_and_stays_until_unpinned():
    runner = runner_of(OnDemand(idle_ttl="10m"))
    runner.bind()
    await runner.reside(Pin())
    assert runner.state is EngineState.READY and math.isinf(runner.keep_alive)
    assert runner.unloads_in() is None
    await runner.reside(Unpin())
    assert runner.keep_alive is None
    await runner.stop("test")
