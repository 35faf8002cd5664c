"""The README's first example, run as written against `gateway serve` on the shipped config:
what a new user sees is what the README shows."""

from __future__ import annotations

import json
import re
import subprocess

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
