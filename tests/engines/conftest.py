"""Fixtures of the engine tests."""

from __future__ import annotations

import pytest

from engines.log import LISTENERS


@pytest.fixture
def events():
    """The events emitted during the test (as the gateway's metrics hear them)."""
    heard: list = []
    token = LISTENERS.set([heard.append])
    yield heard
    LISTENERS.reset(token)
