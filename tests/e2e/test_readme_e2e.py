"""The README's first examples, run as written against `gateway serve` on the shipped config:
what a new user sees is what the README shows, and what its set-up installs runs them."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib

from conftest import REPO


def readme_block(after: str, language: str) -> str:
    """The first fenced `language` block after the line containing `after`."""
    text = (REPO / "README.md").read_text()
    start = text.index(after)
    match = re.compile(rf"```{language}\n(.*?)```", re.S).search(text, start)
    assert match, f"no {language} block after {after!r}"
    return match.group(1)


def test_the_readme_curl_example_answers_what_the_readme_shows(shipped_gateway):
    command = readme_block("Then, from any client", "sh")
    shown = json.loads(readme_block("It answers", "json"))
    command = command.replace("http://127.0.0.1:8000", shipped_gateway.url)
    run = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    text = answer["choices"][0]["message"]["content"]
    assert text == shown["choices"][0]["message"]["content"] == "The capital of France is Paris."
    assert answer["model"] == shown["model"]
    # The shape too, so the README cannot drift from what the gateway writes.
    assert answer.keys() == shown.keys()
    assert answer["choices"][0].keys() == shown["choices"][0].keys()
    assert answer["choices"][0]["message"].keys() == shown["choices"][0]["message"].keys()


def test_the_readme_python_snippet_streams_an_answer(shipped_gateway):
    snippet = readme_block("Then, from any client", "python")
    snippet = snippet.replace("http://127.0.0.1:8000", shipped_gateway.url)
    run = subprocess.run(
        [sys.executable, "-c", snippet], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip()


def _setup_installs() -> set[str]:
    """The distributions `./setup.sh` (no `test`) installs from pyproject.toml: the
    dependencies and the extras it always asks for (cpu is Linux's MLX backend)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = (REPO / "setup.sh").read_text().splitlines()
    assigned = [line for line in lines if "extras=" in line and "= test" not in line]
    extras = {word for line in assigned for word in re.findall(r"\b[a-z]+\b", line)}
    wanted = [*project["dependencies"]]
    for extra, requirements in project["optional-dependencies"].items():
        if extra in extras and extra != "test":
            wanted += requirements
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower().replace("_", "-") for r in wanted}


def _imported(source: str) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names)


def test_the_readme_set_up_installs_what_its_snippet_and_the_examples_import():
    # `./setup.sh && .venv/bin/gateway serve` is step (a): after it, the README's Python
    # snippet and examples/*.py run in .venv without a `pip install` of their own.
    sources = [readme_block("Then, from any client", "python")]
    sources += [path.read_text() for path in sorted((REPO / "examples").glob("*.py"))]
    distributions = importlib.metadata.packages_distributions()
    installed = _setup_installs()
    for module in set().union(*map(_imported, sources)) - {"__future__"}:
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        assert names & installed, f"{module}: not installed by ./setup.sh (no test)"
