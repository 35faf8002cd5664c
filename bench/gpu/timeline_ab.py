"""Sides of `bench/timeline.py` runs side by side: per-round ratios of a 128-stream burst's
parts and of the handler's CPU time.

    python3 bench/gpu/timeline_ab.py [--sides new,old] DIR [DIR ...]

Each DIR holds `timeline-rK-SIDE.txt` for rounds K and each side (`timeline.py --burst 128
--concurrency 128` outputs, run alternately: `ab.sh`'s two trees `new,old`, or its `clients`
run's `one,four,pinned`). Printed per DIR, for each part: the median and spread of each side
and of the per-round ratios of every side to the first.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

BURST = {
    "first to last request head parsed": "heads parsed",
    "first head to last request queued": "last request queued",
    "model thread admitting, first admit to last joined": "model thread admitting",
    "first head to the first step of all the burst": "first step of the whole burst",
    "first head to the last client's first token": "last client's first token",
}


def parts(path: Path) -> dict[str, float]:
    """The burst's parts (ms from its first head), the 128-stream step interval, and the
    handler's CPU time of the serial and the batched lone stream (ms)."""
    found: dict[str, float] = {}
    handlers = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 6:
            continue
        if cells[2] in BURST:
            found[BURST[cells[2]]] = float(cells[4])
        elif cells[1] == "batched, 128 streams" and cells[2] == "step interval":
            found["128-stream step interval"] = float(cells[4])
        elif cells[2].startswith("handler:") and len(cells) > 7:
            handlers.append(float(cells[7]))
    found["handler CPU, serial"], found["handler CPU, batched"] = handlers[:2]
    return found


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main() -> None:
    args = sys.argv[1:]
    sides = ["new", "old"]
    if args[:1] == ["--sides"]:
        sides, args = args[1].split(","), args[2:]
    first = sides[0]
    for folder in map(Path, args):
        rounds = [
            {
                side: parts(path.with_name(path.name.replace(f"-{first}.", f"-{side}.")))
                for side in sides
            }
            for path in sorted(folder.glob(f"timeline-r*-{first}.txt"))
        ]
        print(f"{folder}: {len(rounds)} rounds, ms (median, spread) and per-round / {first}")
        for part in rounds[0][first]:
            values = {side: [r[side][part] for r in rounds] for side in sides}
            cells = [f"{side} {spread(values[side])}" for side in sides]
            cells += [
                f"{side}/{first} "
                + spread([a / b for a, b in zip(values[side], values[first], strict=True)])
                for side in sides[1:]
            ]
            print(f"  {part:30s} " + "  ".join(cells))


if __name__ == "__main__":
    main()
