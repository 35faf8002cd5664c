"""pyproject.toml's dependency ranges: what runs here satisfies them, and the libraries whose
internals the gateway relies on are bounded above."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
# Libraries the gateway relies on beyond their public API (see the comment in pyproject).
RELIED_ON_INTERNALS = {"mlx-lm", "uvicorn", "mlx-audio"}


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"]]


def test_the_installed_versions_satisfy_every_declared_range():
    for requirement in requirements():
        installed = version(requirement.name)
        assert requirement.specifier.contains(installed, prereleases=True), (
            f"{requirement.name} {installed} is outside {requirement.specifier}"
        )


def test_libraries_whose_internals_we_rely_on_have_an_upper_bound_and_a_tested_floor():
    declared = {r.name: r.specifier for r in requirements()}
    for name in RELIED_ON_INTERNALS:
        operators = {spec.operator for spec in declared[name]}
        assert "<" in operators and ">=" in operators, f"{name}: {declared[name]}"
    # One thread per runner is safe only with mlx-lm's per-thread generation stream (0.32).
    assert not declared["mlx-lm"].contains("0.31.9")


def test_no_reach_into_mlx_lm_private_attributes():
    for source in (ROOT / "engines").rglob("*.py"):
        assert "._lru" not in source.read_text(), source
