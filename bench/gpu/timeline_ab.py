"""Two trees' `bench/timeline.py` outputs side by side: per-pair ratios of a 128-stream
burst's parts and of the handler's CPU time.

    python3 bench/gpu/timeline_ab.py DIR [DIR ...]

Each DIR holds `timeline-rK-new.txt` and `timeline-rK-old.txt` for rounds K (the two trees'
`timeline.py --burst 128 --concurrency 128` outputs, run alternately). Printed per DIR, for
each part: the median and spread of each side and of the per-round new / old ratios.
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


def main() -> None:
    for folder in map(Path, sys.argv[1:]):
        pairs = [
            (parts(new), parts(new.with_name(new.name.replace("-new", "-old"))))
            for new in sorted(folder.glob("timeline-r*-new.txt"))
        ]
        print(f"{folder}: {len(pairs)} rounds, ms (median, spread) and new / old per round")
        for part in pairs[0][0]:
            new, old = ([p[side][part] for p in pairs] for side in (0, 1))
            ratios = [a / b for a, b in zip(new, old, strict=True)]
            print(
                f"  {part:30s} new {statistics.median(new):8.3f} ({min(new):.3f}-{max(new):.3f})"
                f"  old {statistics.median(old):8.3f} ({min(old):.3f}-{max(old):.3f})"
                f"  ratio {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
            )


if __name__ == "__main__":
    main()
