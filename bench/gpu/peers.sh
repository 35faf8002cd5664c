#!/usr/bin/env bash
# GPU machine, after stage2.sh on the same warm machine, with .gwvllm carried (made here by
# `bash bench/gpu/pack_peers.sh`): install vllm-mlx's wheels into a folder of their own
# ($GW_STAGE/vllm: it pins mlx-lm<0.32 and starlette, so only its own process sees them, on
# PYTHONPATH, beside the image's MLX CUDA build), build bfloat16-stored random-weight models
# (vllm-mlx runs weights as stored; the gateway holds 4-bit ones as bfloat16 on CUDA, so a
# 4-bit directory would not be the same arithmetic) and run bench/peers/vllm_mlx.py on each.
#   bash bench/gpu/peers.sh "1b 8b" [vllm_mlx.py options]      results in $OUT
set -euo pipefail
S=${GW_STAGE:-$HOME/gwstage}
out=${OUT:-gw-results}
shapes=${1:-1b}
shift || true
mkdir -p "$out"
if [ ! -x "$S/vllm-mlx" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$S/vllm" .gwvllm/wheels/*.whl
    cat > "$S/vllm-mlx" <<SH
#!/bin/sh
PYTHONPATH=$S/vllm exec python3 -c 'import sys; from vllm_mlx.cli import main; sys.argv[0] = "vllm-mlx"; sys.exit(main())' "\$@"
SH
    chmod +x "$S/vllm-mlx"
    "$S/vllm-mlx" serve --help > /dev/null && echo "vllm-mlx installed in $S/vllm"
    PYTHONPATH=$S/vllm python3 -c 'import mlx_lm, transformers, vllm_mlx; print("vllm-mlx side: mlx-lm", mlx_lm.__version__, "transformers", transformers.__version__)'
fi
PYTHONUNBUFFERED=1 python3 bench/gpu/make_models.py --unquantized --tokenizer "$S/tokenizer" \
    --out "$S/models" $shapes 2>&1 | tee -a "$out/models-peers.log"
for shape in $shapes; do
    PYTHONUNBUFFERED=1 BENCH_NO_RECORD=1 python3 bench/peers/vllm_mlx.py --vllm "$S/vllm-mlx" \
        --model "$S/models/$shape-bfloat16" "$@" 2>&1 | tee "$out/peers-$shape.log"
done
