"""End-to-end tests run against the shipped config's gateway unless a module starts its own."""

import pytest


@pytest.fixture(scope="module")
def gateway(shipped_gateway):
    return shipped_gateway
