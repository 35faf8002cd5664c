#!/usr/bin/env bash
# Local: download vllm-mlx 0.6.0 and what it needs beyond the GPU image and the gateway's own kit
# (CPython 3.12 manylinux wheels, no deps) into .gwvllm/wheels (ignored by git; ~5 MiB), for
# bench/gpu/peers.sh. The list is what `vllm-mlx serve` imports to serve a text model (read with
# `python -X importtime` on the CPU install of docs/peers.md; its MCP, structured-output and
# audio packages load only when asked for), less the image's packages (image-packages.txt).
# The image's transformers (5.17) serves it; a carried 5.25 wanted a newer huggingface-hub.
# (The packages vllm-mlx shares with the gateway's MCP client now come in the gateway's kit, wheels.txt.)
#   bash bench/gpu/pack_peers.sh        (from the checkout's root)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .gwvllm/wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --platform manylinux_2_35_x86_64 \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gwvllm/wheels \
    vllm-mlx==0.6.0 mlx-lm==0.31.3 fastapi==0.165.0 starlette==1.10.0 \
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
    sse-starlette==3.7.1 python-multipart==0.0.34 opentelemetry-api==1.45.3 truststore==0.10.5 \
    httpcore2==2.17.0 httpx2==2.17.0 tabulate pytz==2026.6
du -sh .gwvllm
