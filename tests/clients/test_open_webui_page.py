"""Open WebUI itself -- its released server (`open-webui serve`, 0.12.4 from PyPI) and its page
in a real headless Chromium -- pointed at the gateway running the shipped configs/models.yaml:
the page chats with the embedded SmolLM2, and Open WebUI's speech-to-text, set to its "OpenAI"
engine with the gateway as base URL and model `whisper`, transcribes beckett.wav through Open
WebUI's own /api/v1/audio/transcriptions.

Open WebUI runs unmodified, in its own venv (.venv-webui, made by `./setup.sh test`): the
package --no-deps plus what its slim mode imports (tests/clients/open_webui_requirements.txt).
It is configured only through its documented settings: environment variables (slim mode, no
login, offline, the gateway as its OpenAI connection, no Ollama, no title/tag/follow-up side
requests, which would queue behind the chat on a 2-core CPU) and its model editor's
"Builtin Tools" capability, turned off for smollm2 through the REST call the editor makes. With
the built-in tools on (Open WebUI's default), the page sends 36 tool definitions (~24.9k
tokens): the shipped `tools_overflow: drop_unused` keeps those that fit, but the real 135M
model's prefill of the ~8k tokens kept takes minutes on this CPU, so the page's default is
tested on a scripted model with SmolLM2's window and the same policy, on a second gateway that
Open WebUI has as its second OpenAI connection."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from conftest import REPO, free_port, serving
from playwright.sync_api import sync_playwright
from speech_clips import BECKETT, WORDS, words

OPEN_WEBUI = REPO / ".venv-webui" / "bin" / "open-webui"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
ARGS += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
QUESTION = "What is the capital of France?"
# Screenshots for docs/open-webui.md: written into docs/open-webui/ when this is set.
SCREENSHOTS = os.environ.get("GATEWAY_SCREENSHOTS")


# A second gateway, for the page as it is by default: its built-in tools on. The scripted model
# has SmolLM2's window and the shipped policy, and answers at once where SmolLM2's prefill of
# the ~8k tokens of tools kept would take minutes.
TOOLS_CONFIG = """
models:
  - id: webui-tools
    engine: scripted
    context: {max: 8192, tools_overflow: drop_unused}
    script: {reply: "The capital of France is Paris."}
"""


def settings(gateway_urls: list[str], data: Path) -> dict[str, str]:
    """Open WebUI's own environment variables (docs.openwebui.com, env-configuration)."""
    return {
        "USE_SLIM_DOCKER": "true",  # its slim image: no local embedding, whisper or OCR models
        "FROM_INIT_PY": "true",  # what its `open-webui` entry point sets: serve the packaged page
        "DATA_DIR": str(data),
        "WEBUI_AUTH": "false",  # single-user: the page signs in as the admin by itself
        "WEBUI_SECRET_KEY": "open-webui-page-test",
        "OFFLINE_MODE": "true",
        "ENABLE_VERSION_UPDATE_CHECK": "false",
        "ANONYMIZED_TELEMETRY": "false",
        "HF_HUB_OFFLINE": "1",
        "ENABLE_OLLAMA_API": "false",
        "ENABLE_OPENAI_API": "true",
        # Two OpenAI connections: the shipped gateway and the scripted one. Neither sets api_keys.
        "OPENAI_API_BASE_URLS": ";".join(f"{url}/v1" for url in gateway_urls),
        "OPENAI_API_KEYS": ";".join("unused" for _ in gateway_urls),
        "RAG_EMBEDDING_ENGINE": "openai",
        "BYPASS_EMBEDDING_AND_RETRIEVAL": "true",
        "ENABLE_TITLE_GENERATION": "false",
        "ENABLE_TAGS_GENERATION": "false",
        "ENABLE_FOLLOW_UP_GENERATION": "false",
        "DEFAULT_MODELS": "smollm2",
    }


@pytest.fixture(scope="module")
def tools_gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("open-webui-tools"), TOOLS_CONFIG) as process:
        yield process


@pytest.fixture(scope="module")
def open_webui(shipped_gateway, tools_gateway, tmp_path_factory):
    """`open-webui serve` on a port of its own; yields an httpx client signed in as its admin."""
    if not OPEN_WEBUI.exists():
        pytest.fail("Open WebUI is not installed: run ./setup.sh test (it makes .venv-webui)")
    folder = tmp_path_factory.mktemp("open-webui")
    (folder / "data").mkdir()
    port = free_port()
    log = (folder / "open-webui.log").open("w")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    process = subprocess.Popen(
        [str(OPEN_WEBUI), "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=folder,
        env={**env, **settings([shipped_gateway.url, tools_gateway.url], folder / "data")},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # it imports ~50 packages and migrates its database
        while True:
            assert process.poll() is None, (folder / "open-webui.log").read_text()[-4000:]
            assert time.monotonic() < deadline, (folder / "open-webui.log").read_text()[-4000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        # WEBUI_AUTH=false: signing in with no credentials gives the admin's token, as the page does.
        signin = httpx.post(f"{url}/api/v1/auths/signin", json={"email": "", "password": ""})
        assert signin.status_code == 200, signin.text
        headers = {"Authorization": f"Bearer {signin.json()['token']}"}
        with httpx.Client(base_url=url, headers=headers, timeout=300) as client:
            yield client
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture
def page():
    if not os.path.exists(CHROMIUM):
        pytest.fail("chromium is missing: `./setup.sh test` installs it")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        yield page
        browser.close()
        assert errors == []


def ask(page, url: str, question: str) -> str:
    """Open the page at `url`, type `question` into its chat box, return the reply's text."""
    page.goto(url)
    box = page.locator("#chat-input")
    box.wait_for(timeout=120_000)
    whats_new = page.get_by_role("button", name="Okay, Let's Go!")  # its release notes, once
    if whats_new.count():
        whats_new.click()
    box.click()
    page.keyboard.type(question)
    page.keyboard.press("Enter")
    reply = page.locator(".chat-assistant").last
    reply.get_by_text("Paris").wait_for(timeout=300_000)
    assert page.locator(".chat-user").last.inner_text().startswith(question)
    return reply.inner_text()


def test_open_webuis_models_are_the_gateways(open_webui):
    listed = open_webui.get("/api/models").json()["data"]
    by_id = {model["id"]: model for model in listed}
    assert {"smollm2", "whisper", "minilm", "webui-tools"} <= set(by_id)
    assert by_id["smollm2"]["owned_by"] == "openai"  # through its OpenAI connection: the gateway


def test_open_webuis_page_chats_with_the_embedded_smollm2(open_webui, shipped_gateway, page):
    # Its model editor's "Builtin Tools" capability, off: the POST its Save button makes.
    meta = {"capabilities": {"builtin_tools": False}}
    model = {"id": "smollm2", "base_model_id": None, "name": "smollm2", "meta": meta}
    created = open_webui.post("/api/v1/models/create", json={**model, "params": {}})
    assert created.status_code == 200, created.text
    before = len(shipped_gateway.events("generated", model="smollm2"))

    reply = ask(page, f"{open_webui.base_url}/", QUESTION)
    assert "The capital of France is Paris" in reply

    generated = shipped_gateway.wait_events("generated", before + 1, timeout=60, model="smollm2")[
        -1
    ]
    assert generated["stop_reason"] == "stop" and generated["prompt_tokens"] < 200  # no tools
    folder = Path(SCREENSHOTS) if SCREENSHOTS else None
    if folder:
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / "chat.png"))


def test_open_webuis_speech_to_text_transcribes_through_the_gateway(open_webui, shipped_gateway):
    # Admin Settings > Audio > Speech-to-Text: engine "OpenAI", the gateway's URL, model whisper.
    config = open_webui.get("/api/v1/audio/config").json()
    config["stt"] |= {
        "ENGINE": "openai",
        "OPENAI_API_BASE_URL": f"{shipped_gateway.url}/v1",
        "OPENAI_API_KEY": "unused",
        "MODEL": "whisper",
    }
    saved = open_webui.post("/api/v1/audio/config/update", json=config)
    assert saved.status_code == 200 and saved.json()["stt"]["ENGINE"] == "openai", saved.text
    before = len(shipped_gateway.events("generated", model="whisper"))

    clip = {"file": ("beckett.wav", BECKETT.read_bytes(), "audio/wav")}
    answer = open_webui.post("/api/v1/audio/transcriptions", files=clip)
    assert answer.status_code == 200, answer.text
    assert words(answer.json()["text"]) == WORDS
    event = shipped_gateway.wait_events("generated", before + 1, timeout=60, model="whisper")[-1]
    assert event["stop_reason"] == "transcribed"


def test_open_webuis_page_with_its_built_in_tools_is_answered(open_webui, tools_gateway, page):
    reply = ask(page, f"{open_webui.base_url}/?models=webui-tools", QUESTION)
    assert "The capital of France is Paris." in reply
    # The page sent Open WebUI's built-in tools (36 here, ~24.9k tokens): those that fit stayed.
    event = tools_gateway.wait_event("tools_dropped", timeout=60, model="webui-tools")
    assert event["window"] == 8192 and event["prompt_tokens"] > 3 * 8192
    assert event["kept"] > 0 and {"add_memory", "write_note", "view_chat"} <= set(event["dropped"])
