#!/usr/bin/env bash
# GPU machine, after stage2.sh on the same warm machine: build the random-weight models (they stay on
# the machine's disk between calls while it is warm) and measure; files land in $OUT.
#   bash bench/gpu/run.sh [bench_gateway.py options]        e.g. --shapes smollm2,1b --tag a
# BUILD="smollm2 1b 8b" builds those models first (default: the shapes measured).
set -euo pipefail
S=${GW_STAGE:-$HOME/gwstage}
out=${OUT:-gw-results}
mkdir -p "$out"
shapes=smollm2,1b,8b tag=""
prev=""
for a in "$@"; do
    [ "$prev" = --shapes ] && shapes=$a
    [ "$prev" = --tag ] && tag=-$a
    prev=$a
done
PYTHONUNBUFFERED=1 python3 bench/gpu/make_models.py --tokenizer "$S/tokenizer" --out "$S/models" \
    ${BUILD:-${shapes//,/ }} 2>&1 | tee "$out/models$tag.log"
PYTHONUNBUFFERED=1 python3 bench/gpu/bench_gateway.py --product "$PWD" --models "$S/models" \
    --out "$out" "$@" 2>&1 | tee "$out/bench$tag.log"
