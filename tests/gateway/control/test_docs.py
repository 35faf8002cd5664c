"""The config reference's table of model keys is generated from `MODEL_KEYS`: the committed
docs/config.md must hold what `gateway docs` renders, and every key must have its words."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.control.key_docs import (
    BEGIN,
    DOCS_PATH,
    END,
    is_current,
    render_model_keys,
    write_docs,
)
from gateway.control.key_text import key_text
from schemas.config_keys import MODEL_KEYS


def test_committed_table_matches_model_keys():
    assert is_current(), "docs/config.md's model keys are stale: run `gateway docs`"


def test_every_model_key_has_its_rows():
    text = key_text()
    assert list(text) == ["id", *MODEL_KEYS]
    table = render_model_keys()
    for key, rows in text.items():
        for row in rows:
            assert row.keys.split(".")[0].split(", ")[0] == key
            assert f"| `{row.keys.split(', ')[0]}`" in table


def test_check_fails_on_a_drifted_table_and_docs_rewrites_it(tmp_path: Path, monkeypatch):
    page = tmp_path / "config.md"
    page.write_text(DOCS_PATH.read_text().replace("| `kv_bits` | none |", "| `kv_bits` | `8` |"))
    assert not is_current(page)
    monkeypatch.setattr("gateway.control.key_docs.DOCS_PATH", page)
    assert main(["docs", "--check"]) == 1
    assert main(["docs"]) == 0
    assert main(["docs", "--check"]) == 0
    assert page.read_text() == DOCS_PATH.read_text()
    assert not write_docs(page)  # nothing left to change


def test_text_outside_the_markers_is_kept(tmp_path: Path):
    page = tmp_path / "config.md"
    page.write_text(f"before\n{BEGIN}\nold table\n{END}\nafter\n")
    assert write_docs(page)
    assert page.read_text() == f"before\n{BEGIN}\n{render_model_keys()}{END}\nafter\n"


def test_a_page_without_markers_is_an_error(tmp_path: Path):
    page = tmp_path / "config.md"
    page.write_text("no table here\n")
    with pytest.raises(ValueError, match="markers"):
        write_docs(page)


def test_docs_help(capsys):
    with pytest.raises(SystemExit) as leave:
        main(["docs", "--help"])
    assert leave.value.code == 0
    assert "--check" in capsys.readouterr().out
