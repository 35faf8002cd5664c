"""`server.files` and `server.batches` in models.yaml: defaults, and errors at their place."""

from __future__ import annotations

import textwrap

import openai
import pytest
from conftest import serving

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config

MODELS = """\
models:
  - id: echo
    engine: scripted
"""


def test_defaults_and_values_read():
    config = parse_config(MODELS, "t.yaml", environ={})
    assert config.server.batches.priority == -100 and config.server.batches.concurrency == 1
    assert config.server.files.max_file_bytes == "200MiB"
    text = "server:\n  batches: {priority: -5, concurrency: 3}\n  files: {max_bytes: 2GiB}\n"
    config = parse_config(text + MODELS, "t.yaml", environ={})
    assert (config.server.batches.priority, config.server.batches.concurrency) == (-5, 3)
    assert config.server.files.max_bytes == "2GiB"


def test_bad_values_are_errors_at_their_line_and_column():
    text = textwrap.dedent(
        """\
        server:
          batches: {concurrency: 0, priority: -101, size: 3}
          files: {max_bytes: lots}
        """
    )
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text + MODELS, "t.yaml", environ={})
    errors = info.value.errors
    assert errors[0].startswith("t.yaml:2:26: server.batches.concurrency: Expected `int` >= 1")
    assert errors[1].startswith("t.yaml:2:39: server.batches.priority: Expected `int` >= -100")
    assert errors[2].startswith("t.yaml:2:45: server.batches.size: unknown key 'size'")
    assert errors[3].startswith("t.yaml:3:22: server.files.max_bytes: expected a size")
    assert len(errors) == 4


def test_a_batch_store_that_cannot_be_opened_is_a_503_on_its_routes_alone(tmp_path):
    """Batches must outlive the process: a corrupt `batches.sqlite3` is not replaced by one
    in memory. It is said at start, the Files and Batch routes answer a 503 naming it, and
    every other route serves as ever."""
    store = tmp_path / "state" / "batches.sqlite3"
    store.parent.mkdir()
    store.write_bytes(b"this is not a database " * 100)
    config = "server: {state_dir: state}\n" + MODELS
    with serving(tmp_path, config) as gateway:
        client = gateway.openai()
        with pytest.raises(openai.InternalServerError) as refused:
            client.files.list()
        assert refused.value.status_code == 503
        assert f"the batch store {store} cannot be used (file is not a database)" in str(
            refused.value.message
        )
        with pytest.raises(openai.InternalServerError):
            client.batches.list()
        reply = client.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "hello from echo"
    warning = "gateway: warning: /v1/files and /v1/batches answer 503: the batch store"
    assert warning in gateway.log.read_text()
