"""`gateway check` applies what a reload applies, model sources included: a file it passes
is one a reload takes, and one it fails names every problem."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO


def check(tmp_path, config: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "models.yaml"
    path.write_text(textwrap.dedent(config))
    command = [sys.executable, "-m", "gateway", "check", str(path)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_check_refuses_a_model_source_that_does_not_exist(tmp_path):
    (tmp_path / "empty-model").mkdir()
    (tmp_path / "corrupt.gguf").write_bytes(b"not a gguf file at all")
    result = check(
        tmp_path,
        """
        models:
          - id: echo
            engine: scripted
          - id: missing
            source: ./no-such-model.gguf
          - id: empty
            source: ./empty-model
          - id: corrupt
            source: ./corrupt.gguf
        """,
    )
    assert result.returncode == 1, result.stdout
    errors = result.stderr.splitlines()
    assert len(errors) == 3, errors
    assert errors[0].startswith("models[missing].source:") and "no-such-model.gguf" in errors[0]
    assert errors[1].startswith("models[empty].source:") and "empty-model" in errors[1]
    assert errors[2].startswith("models[corrupt].source:") and "corrupt.gguf" in errors[2]


def test_check_passes_a_config_whose_sources_are_all_there(tmp_path):
    result = check(tmp_path, "models:\n  - id: echo\n    engine: scripted\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("echo  engine=scripted")


@pytest.mark.parametrize("name", ["responses.sqlite3", "activity.sqlite3", "batches.sqlite3"])
def test_check_refuses_a_corrupt_responses_store_or_activity_history(tmp_path, name):
    database = tmp_path / "state" / name
    database.parent.mkdir()
    database.write_bytes(b"this is not a database " * 100)
    result = check(
        tmp_path, "server: {state_dir: state}\nmodels:\n  - id: echo\n    engine: scripted\n"
    )
    assert result.returncode == 1, result.stdout
    [error] = result.stderr.splitlines()
    assert error.startswith("server.state_dir:") and str(database) in error
    assert "not a database" in error


def test_check_reports_where_the_kv_cache_lives_and_how_full_it_is(tmp_path):
    from engines.cache.blockfile import write_block

    shard = tmp_path / "kv" / "ab"
    shard.mkdir(parents=True)
    size = write_block(shard / "ab12.safetensors", {"0.keys": ("F32", np.zeros(1 << 18))})
    result = check(
        tmp_path,
        """
        server: {cache: {dir: ./kv, max_bytes: 1GiB}}
        models:
          - id: echo
            engine: scripted
        """,
    )
    assert result.returncode == 0, result.stderr
    last = result.stdout.splitlines()[-1]
    assert last == f"kv cache: {tmp_path / 'kv'}, 1 blocks, {size / 2**30:.2f} GiB of 1.00 GiB"
    off = check(
        tmp_path, "server: {cache: {max_bytes: 0}}\nmodels:\n  - id: e\n    engine: scripted\n"
    )
    assert off.stdout.splitlines()[-1].startswith("kv cache: off")


def test_check_warns_of_state_and_cache_files_other_users_may_read(tmp_path):
    import sqlite3

    from engines.cache.blockfile import write_block

    state, cache = tmp_path / "state", tmp_path / "kv"
    state.mkdir(mode=0o700)
    sqlite3.connect(state / "activity.sqlite3").close()
    (state / "activity.sqlite3").chmod(0o644)  # as gateways made it before
    shard = cache / "ab"
    shard.mkdir(parents=True)
    cache.chmod(0o755)
    shard.chmod(0o700)
    block = shard / "ab12.safetensors"
    write_block(block, {"0.keys": ("F32", np.zeros(4))})
    block.chmod(0o640)
    config = """
        server: {state_dir: state, cache: {dir: ./kv, max_bytes: 1GiB}}
        models:
          - id: echo
            engine: scripted
    """
    result = check(tmp_path, config)
    assert result.returncode == 0, result.stderr
    warnings = result.stderr.splitlines()
    assert warnings == [
        f"warning: {state / 'activity.sqlite3'}: file mode 0644, open to other users "
        "(the gateway makes it 0600: chmod 600 it)",
        f"warning: {cache}: directory mode 0755, open to other users "
        "(the gateway makes it 0700: chmod 700 it)",
        f"warning: {block}: file mode 0640, open to other users "
        "(the gateway makes it 0600: chmod 600 it)",
    ], warnings
    for path in (state / "activity.sqlite3", cache, block):
        path.chmod(0o600 if path.is_file() else 0o700)
    assert check(tmp_path, config).stderr == ""
