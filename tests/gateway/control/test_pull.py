"""`gateway pull` and `gateway check` on hf: models, against the local Hub stand-in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import REPO
from hub_server import FakeHub, Repo, smollm2_files

B = "b" * 40


@pytest.fixture(scope="module")
def hub():
    files, gguf = smollm2_files()
    with FakeHub({"org/smol": Repo({B: {**files, "smol.Q4_1.gguf": gguf}}, {"main": B})}) as server:
        yield server


def gateway(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=REPO,
        # Whatever the machine sets, these tests own the cache, token and mode.
        env={**os.environ, "HF_TOKEN": "", "HF_HUB_CACHE": "", "HF_HUB_OFFLINE": "", **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_pull_downloads_with_a_bar_per_file_and_check_says_cached(hub, tmp_path) -> None:
    config = tmp_path / "models.yaml"
    config.write_text(
        textwrap.dedent("""
        models:
          - id: smol
            source: hf:org/smol
            aliases: [small]
          - id: smol-gguf
            source: hf:org/smol/smol.Q4_1.gguf
          - id: echo
            engine: scripted
        """)
    )
    # TQDM_POSITION=-1 keeps huggingface_hub's bars on although stderr is not a terminal.
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url, "TQDM_POSITION": "-1"}
    before = gateway("check", str(config), env=env)
    assert before.returncode == 0 and before.stdout.count("cached=no (run `gateway pull`") == 2

    pulled = gateway("pull", "--config", str(config), env=env)
    assert pulled.returncode == 0, pulled.stderr
    out = pulled.stdout.splitlines()
    assert "smol: hf:org/smol" in out and f"smol: main -> {B}, 101.9 MB, 101.9 MB in" in "\n".join(
        out
    )
    assert any(line.startswith("smol-gguf: converted to MLX in ") for line in out)
    for file in ["config.json", "tokenizer.json", "model.safetensors", "smol.Q4_1.gguf"]:
        assert f"{file}: 100%" in pulled.stderr  # huggingface_hub's own tqdm, per file
    assert "98.4M/98.4M" in pulled.stderr

    after = gateway("check", str(config), env=env)
    assert after.stdout.count(f"cached={B[:12]}") == 2
    hub.requests.clear()
    again = gateway("pull", "--config", str(config), "small", "echo", env=env)
    assert again.returncode == 0
    assert f"smol: main -> {B}, 101.9 MB, up to date" in again.stdout
    assert "echo: scripted is local: nothing to pull" in again.stdout
    assert hub.file_requests("GET") == []  # only the branch was asked about

    nothing = gateway("pull", "--config", str(REPO / "configs" / "models.yaml"), env=env)
    assert nothing.returncode == 0 and "no hf: models to pull" in nothing.stdout
    unknown = gateway("pull", "--config", str(config), "nope", env=env)
    assert unknown.returncode == 1 and "not in" in unknown.stderr and "nope" in unknown.stderr
    offline = gateway(
        "pull",
        "--config",
        str(config),
        env={**env, "HF_HOME": str(tmp_path / "x"), "HF_HUB_OFFLINE": "1"},
    )
    assert (
        offline.returncode == 1 and "smol: failed: not in the Hugging Face cache" in offline.stderr
    )


def test_the_shipped_hub_example_pulls(tmp_path) -> None:
    files, gguf = smollm2_files()  # the example's repositories, served by the stand-in
    repos = {
        "HuggingFaceTB/SmolLM2-135M-Instruct": Repo({B: files}, {"main": B}),
        "bartowski/SmolLM2-135M-Instruct-GGUF": Repo(
            {B: {"SmolLM2-135M-Instruct-Q8_0.gguf": gguf}}, {"main": B}
        ),
    }
    with FakeHub(repos) as hub:
        env = {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url, "HF_TOKEN": ""}
        config = str(REPO / "configs" / "examples" / "hub.yaml")
        pulled = gateway("pull", "--config", config, "smollm2-135m", "smollm2-gguf", env=env)
        assert pulled.returncode == 0, pulled.stderr
        assert "smollm2-gguf: converted to MLX in" in pulled.stdout
        missing = gateway("pull", "--config", config, "qwen3-4b", env=env)  # not on this hub
        assert missing.returncode == 1
        assert "qwen3-4b: failed: 404 repository not found" in missing.stderr


def test_an_interrupted_pull_keeps_finished_files_and_the_next_one_goes_on(hub, tmp_path) -> None:
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  - id: smol\n    source: hf:org/smol\n")
    env = {
        **os.environ,
        **{"HF_TOKEN": "", "HF_HUB_CACHE": "", "HF_HUB_OFFLINE": ""},
        **{"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url},
    }
    hub.requests.clear()
    hub.rate = 1e6  # the weights take about 100 seconds: Ctrl-C always comes mid-transfer
    try:
        pulling = subprocess.Popen(
            [sys.executable, "-m", "gateway", "pull", "--config", str(config)],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            # As at a terminal: a pytest started in the background (`cmd &`) has SIGINT
            # ignored, and its children would inherit that.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not any(p.endswith("/model.safetensors") for p, _ in hub.file_requests("GET")):
            assert time.monotonic() < deadline, "the weights were never asked for"
            time.sleep(0.1)
        time.sleep(1)
        pulling.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = pulling.communicate(timeout=60)
    finally:
        hub.rate = None
    sent = [p for p, _ in hub.file_requests("GET")]
    assert pulling.returncode == 130 and "finished files are kept" in err, (out, err, sent)
    hub.requests.clear()
    again = gateway("pull", "--config", str(config), env=env)
    assert again.returncode == 0 and "98.4 MB in" in again.stdout
    assert [p.rsplit("/", 1)[-1] for p, _ in hub.file_requests("GET")] == ["model.safetensors"]
