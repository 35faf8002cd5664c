#!/usr/bin/env bash
# On the GPU machine, step 2 (after stage1.sh): install, build the 1B model, then measure this
# tree (new) against another commit's (old: `git archive REV bench configs engines gateway
# schemas pyproject.toml | tar -x -C .gw2/old` here first), alternating, each measurement
# under a timeout and the results archived after each (so a call cut off keeps them):
#
#   bash bench/gpu/ab.sh N timeline   # bench/timeline.py --burst 128, 5 rounds of each tree
#   bash bench/gpu/ab.sh N bench      # bench_gateway.py at 32 and 128 clients, 3 of each
#   bash bench/gpu/ab.sh N clients    # this tree only: contention.py (raw BatchGenerator alone
#                                     # and beside busy processes), then timeline.py's burst read
#                                     # by one client process, four, and four on cores of their
#                                     # own (the gateway on the others), 3 rounds of each
#
# N numbers the run: results in $OUT/runN.tar.xz (read them with timeline_ab.py, or the
# summaries and events of each bench_gateway.py side).
N=$1; WHAT=$2; S=$HOME/gwstage; R=/tmp/r$N; P=$PWD; T0=$(date +%s)
mkdir -p "$R"; uptime > "$R/uptime"; nproc >> "$R/uptime"; lscpu >> "$R/uptime" 2>&1
pack() { tar cJf "$OUT/run$N.tar.xz" -C "$R" . ; }
log() { echo "$* at $(( $(date +%s) - T0 )) s" >> "$R/uptime"; pack; }
bash bench/gpu/stage2.sh > "$R/install.log" 2>&1 &&
    python3 bench/gpu/make_models.py --tokenizer "$S/tokenizer" --out "$S/models" 1b > "$R/models.log" 2>&1
rm -rf /tmp/old && cp -r .gw2/old /tmp/old
log setup
tree() { [ "$1" = old ] && echo /tmp/old || echo "$P"; }
timeline() {  # side rounds limit tag
    dir=$(tree "$1"); procs=0; pins=()
    case $1 in
        one) dir=$P; procs=1;;
        four) dir=$P; procs=4;;
        pinned) dir=$P; procs=4; pins=(BENCH_GATEWAY_CPUS=0-7 BENCH_CLIENT_CPUS=8-15);;
    esac
    (cd "$dir/bench" && env BENCH_NO_RECORD=1 "${pins[@]}" timeout "$3" python3 timeline.py \
        --source "$S/models/1b" --burst 128 --concurrency 128 --rounds "$2" --client-procs $procs \
        > "$R/timeline-$4-$1.txt" 2>&1)
    log "timeline $4 $1 rc=$?"
}
bench() {  # side tag
    timeout 110 python3 bench/gpu/bench_gateway.py --product "$(tree "$1")" --models "$S/models" \
        --out "$R/bg-$2-$1" --shapes 1b --repeats 0 --ttft-rounds 0 --long-rounds 0 --clients 32,128 \
        --rounds 3 --noreuse-clients 0 --raw-prefill n --one-client-repeats 0 --client-procs 4 \
        > "$R/bg-$2-$1.log" 2>&1
    log "bench $2 $1 rc=$?"
    rm -f "$R/bg-$2-$1/profiles.txt"
}
if [ "$WHAT" = clients ]; then
    timeout 120 python3 bench/gpu/contention.py "$S/models/1b" --rounds 5 > "$R/contention.txt" 2>&1
    log "contention rc=$?"
    timeline four 1 120 warm
    for i in 1 2 3; do
        case $i in
            1) order="one four pinned";; 2) order="four pinned one";; 3) order="pinned one four";;
        esac
        for side in $order; do timeline "$side" 2 70 "r$i"; done
    done
elif [ "$WHAT" = timeline ]; then
    timeline new 1 150 warm  # the first process on a machine pays MLX's kernel compiles
    for i in 1 2 3 4 5; do
        if [ $((i % 2)) = 1 ]; then timeline new 3 95 "r$i"; timeline old 3 95 "r$i"
        else timeline old 3 95 "r$i"; timeline new 3 95 "r$i"; fi
    done
else
    bench new a; bench old a; bench old b; bench new b; bench new c; bench old c
fi
