#!/usr/bin/env bash
# GPU machine, after stage2.sh on the same warm machine: speech to text's real-time factor
# (bench/speech.py: the gateway over HTTP, its engine in-process, mlx-whisper in-process,
# Whisper tiny.en on MLX's CUDA backend), from the kit pack_speech.sh writes. Two steps:
#   bash bench/gpu/speech.sh park             (send .gwspeech1) parks part 1 in $GW_STAGE/speech
#   bash bench/gpu/speech.sh run [ARGS...]    (send .gwspeech2) joins and checks the tarball,
#       installs its wheels (--no-index --no-deps), runs bench/speech.py ARGS (default
#       --rounds 7) on the carried model and clips; logs and the table in $OUT
# `run` again with nothing carried measures again on the kit already unpacked.
# A local rehearsal: GW_STAGE=/tmp/gwstage-test OUT=/tmp/out-test SPEECH_PIP_TARGET=/tmp/speech-site,
# with python3 on PATH the product's python.
set -uo pipefail
S=${GW_STAGE:-$HOME/gwstage}/speech
out=${OUT:-gw-results}
mkdir -p "$S" "$out"
export PYTHONUNBUFFERED=1 BENCH_NO_RECORD=1
[ -z "${SPEECH_PIP_TARGET:-}" ] || export PYTHONPATH=$SPEECH_PIP_TARGET${PYTHONPATH:+:$PYTHONPATH}
step=${1:-run}; shift || true

park() {
    [ -f .gwspeech1/speech.part.aa ] || { echo "no .gwspeech1/speech.part.aa: carry .gwspeech1"; return 3; }
    cp .gwspeech1/speech.part.aa .gwspeech1/speech.part.aa.sha256 "$S/" || return 3
    sum=$(sha256sum < "$S/speech.part.aa" | cut -d' ' -f1)
    [ "$sum" = "$(cat "$S/speech.part.aa.sha256")" ] || { echo "part 1: checksum mismatch"; return 4; }
    ls -la "$S"
    echo "part 1 parked; issue 'speech.sh run' carrying .gwspeech2 at once"
}

install() {
    if [ ! -f .gwspeech2/speech.part.ab ]; then
        [ -f "$S/kit/installed" ] && { echo "kit already installed in $S/kit"; return 0; }
        echo "no .gwspeech2 carried and no kit installed in $S/kit"; return 3
    fi
    [ -f "$S/speech.part.aa" ] || { echo "part 1 is gone: the machine was not warm; run 'speech.sh park' again"; return 3; }
    cmp -s "$S/speech.part.aa.sha256" .gwspeech2/speech.part.aa.sha256 \
        || { echo "part 1 parked is another pack's than part 2: park .gwspeech1 of the same pack"; return 4; }
    t0=$(date +%s)
    sum=$(cat "$S/speech.part.aa" .gwspeech2/speech.part.ab | sha256sum | cut -d' ' -f1)
    [ "$sum" = "$(cat .gwspeech2/speech.sha256)" ] || { echo "speech.tar.xz: checksum mismatch"; return 4; }
    rm -rf "$S/kit" "$S/speech" && cat "$S/speech.part.aa" .gwspeech2/speech.part.ab | xz -d -T0 | tar -xf - -C "$S" \
        && mv "$S/speech" "$S/kit" || { echo "unpacking failed"; return 5; }
    (cd "$S/kit" && sha256sum -c --quiet files.sha256) || { echo "model/assets: checksum mismatch"; return 4; }
    python3 bench/gpu/wheeltool.py zip "$S/kit/av" "$S/kit/wheels/$(cat "$S/kit/av.name")" \
        || { echo "rebuilding the PyAV wheel failed"; rm -f "$S/kit/wheels/$(cat "$S/kit/av.name")"; return 5; }
    rm -rf "$S/kit/av"
    # SPEECH_PIP_TARGET (a local rehearsal): into that folder, put first on PYTHONPATH by `run`.
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        ${SPEECH_PIP_TARGET:+--target "$SPEECH_PIP_TARGET"} "$S"/kit/wheels/*.whl \
        || { echo "pip install failed"; return 6; }
    touch "$S/kit/installed"
    echo "installed in $(( $(date +%s) - t0 )) s"
    python3 -m pip list 2>/dev/null | grep -iE "^(av|mlx|mlx-cuda-13|mlx-audio|mlx-whisper|more-itertools|numba|scipy|tiktoken|transformers|huggingface-hub) "
    python3 -c "import av, mlx_audio.stt.models.whisper.whisper, mlx_whisper, mlx.core as mx; print('imports ok; MLX', mx.__version__, mx.default_device()); print(av.__file__, mlx_whisper.__file__)"
}

case $step in
park)
    park 2>&1 | tee "$out/speech-park.log" ;;
run)
    install 2>&1 | tee "$out/speech-install.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
    [ $# -gt 0 ] || set -- --rounds 7
    echo "== bench/speech.py $* $(date -u +%T)"
    timeout "${SPEECH_TIMEOUT_S:-540}" python3 bench/speech.py --sides "${SPEECH_SIDES:-gateway,engine,mlx-whisper}" \
        --assets "$S/kit/assets" --model "$S/kit/model" "$@" 2>&1 | tee "$out/speech.log"
    echo "== done $(date -u +%T) (rc ${PIPESTATUS[0]})" ;;
*)
    echo "usage: speech.sh park|run [bench/speech.py options]"; exit 2 ;;
esac
