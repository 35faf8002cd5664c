#!/usr/bin/env bash
# GPU machine, step 2 (send .gw2), right after stage1.sh on the same warm machine: join the MLX CUDA
# tarball, rebuild its wheel, install every carried wheel into the image's python3 (no index, no
# deps), put the product (this working tree, the current directory) on sys.path, and check what
# MLX and the product pick.
set -euo pipefail
S=${GW_STAGE:-$HOME/gwstage}
[ -f "$S/mlxcuda.part.aa" ] || { echo "part 1 is gone: the machine was not warm; run stage1.sh again"; exit 3; }
t0=$(date +%s)
sum=$(cat "$S/mlxcuda.part.aa" .gw2/mlxcuda.part.ab | sha256sum | cut -d' ' -f1)
[ "$sum" = "$(cat .gw2/mlxcuda.sha256)" ] || { echo "MLX CUDA tarball: checksum mismatch"; exit 4; }
rm -rf "$S/mlxcuda" "$S/whl" && mkdir -p "$S/mlxcuda" "$S/whl"
cat "$S/mlxcuda.part.aa" .gw2/mlxcuda.part.ab | xz -d -T0 | tar -xf - -C "$S/mlxcuda"
python3 bench/gpu/wheeltool.py zip "$S/mlxcuda" "$S/whl/$(cat .gw2/mlxcuda.name)"
rm -rf "$S/mlxcuda"
cp .gw2/wheels/*.whl "$S/whl/"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$S"/whl/*.whl
rm -rf "$S/tokenizer" && cp -r .gw2/tokenizer "$S/tokenizer"
# The working tree is the product: a .pth file puts it on sys.path (no build step).
echo "$PWD" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/mlx-gateway-checkout.pth"
echo "installed in $(( $(date +%s) - t0 )) s; product at $PWD ($(git describe --always --dirty 2>/dev/null || echo no git): the device copies the working tree over the checkout its session began with, so '-dirty' marks a newer tree)"
set +e  # what follows only reports
python3 -m pip list 2>/dev/null | grep -iE "^(mlx|mlx-cuda-13|mlx-lm|mlx-gateway|litestar|uvicorn|msgspec|structlog|watchfiles|jsonschema) "
python3 -c "import mlx.core as mx; print(mx.default_device())"
python3 -c "import litestar, uvicorn, msgspec, structlog, watchfiles, jsonschema, mlx_lm, gateway, engines; print('imports ok')"
python3 -m pip check 2>&1 | grep -iE "mlx|litestar|uvicorn|msgspec|structlog|watchfiles|jsonschema|referencing|rpds|polyfactory|faker|rich-click|sniffio|multipart" || echo "pip check: nothing about the carried packages"
python3 - <<'PY'
import mlx.core as mx
print("mlx", mx.__version__, "| default device", mx.default_device(), "| metal", mx.metal.is_available(),
      "| cuda", mx.cuda.is_available() if hasattr(mx, "cuda") else "n/a")
print("device_info", mx.device_info())
from engines.mlx.platform import detect
from engines.platform import find_openblas
from engines.residency import auto_budget
path = detect()
print("product platform path (detect()):", path.as_dict())
print("OpenBLAS the product would preload:", find_openblas())
print(f"memory_budget auto: {auto_budget(path.memory_bytes, path.cuda) / 2**30:.1f} GiB of {path.memory_bytes / 2**30:.1f} GiB")
PY
python3 -m gateway --help >/dev/null && echo "gateway CLI imports"
exit 0
