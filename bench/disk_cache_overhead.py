"""What the disk tier adds to a prompt it has never seen, in process: the lookup before the
prefill and the copy out of MLX when the conversation is parked (the write itself is on
the store's thread), against the prefill of the same prompt on the real SmolLM2.

    .venv/bin/python bench/disk_cache_overhead.py [--tokens 2000] [--repeats 5]

End to end (bench/disk_cache.py) a fresh prompt's TTFT with the tier on and off differs by
the noise of a shared 2-core machine; this isolates the tier's own work. Target (issue 26):
lookup + copy <= 2 % of the prefill.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import msgspec
from common import REPO, SMOLLM2, fmt, median, report, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[2000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()
    sys.path.insert(0, str(REPO))  # this checkout's engines, not an installed copy's
    from engines.cache import CacheDir
    from engines.mlx.cache.blocks import model_layout
    from engines.mlx.cache.disk import DiskKV
    from engines.mlx.platform import detect, reexec_with_openblas
    from engines.sources.resolve import resolve_source

    reexec_with_openblas()  # the gateway's BLAS, so the prefill is the gateway's
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.models.cache import make_prompt_cache

    from engines.mlx.weights import expand_quantized

    path = resolve_source("smollm2", SMOLLM2, base_dir=None)
    model, _ = mlx_lm.load(str(path))
    expand_quantized(model, "float32")  # as the CPU platform path holds it
    mx.eval(model.parameters())
    warm = make_prompt_cache(model)  # the first forward pass pays for setting up kernels
    mx.eval(model(mx.array([[1, 2, 3, 4]]), cache=warm))
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-kv-") as folder:
        layout = model_layout(model)
        where = CacheDir(Path(folder), 1 << 40)
        disk = DiskKV.open(where, "bench", path, "float32|None|cpu", layout=layout)
        for n in args.tokens:
            lookups, copies, prefills = [], [], []
            for r in range(args.repeats):
                prompt = [(7919 * (i + 1) + r * 104729 + n) % 49152 for i in range(n)]
                started = time.perf_counter()
                assert disk.find(prompt, longer_than=0) is None  # nothing on disk: a miss
                lookups.append(time.perf_counter() - started)
                if r == 0:  # minutes on the CPU: one, and the same cache saved each repeat
                    cache = make_prompt_cache(model)
                    started = time.perf_counter()
                    model(mx.array(prompt)[None], cache=cache)
                    mx.eval([c.state for c in cache])
                    prefills.append(time.perf_counter() - started)
                started = time.perf_counter()
                disk.save(prompt, cache)  # the model thread's part: copy out, queue
                copies.append(time.perf_counter() - started)
                disk.store.close()  # the writes, off the clock
                disk = DiskKV.open(where, "bench", path, f"r{r}", layout=layout)
            share = (median(lookups) + median(copies)) / median(prefills)
            rows.append(
                [n, fmt(median(prefills)), fmt(median(lookups) * 1000, 3),
                 fmt(median(copies) * 1000, 1), fmt(share * 100, 3)]
            )  # fmt: skip
            print(rows[-1], flush=True)
        disk.close()
    body = table(
        ["prompt tokens", "prefill s", "lookup ms (miss)", "copy at park ms", "% of prefill"],
        rows,
    )
    notes = (
        "SmolLM2-135M, float32 on the CPU (the platform path), blocks of 64 tokens. Lookup: "
        "`DiskKV.find` on a prompt with nothing on disk (the hashes and one stat). Copy: "
        "`DiskKV.save` on the caller's thread, the new blocks copied out of MLX and queued; "
        "the files are written on the store's thread. Medians over the repeats (the prefill: one)."
    )
    report("Disk tier: its cost on a fresh prompt, in process", body,
           platform_path=msgspec.structs.asdict(detect()), load_before=load_before,
           notes=notes)  # fmt: skip


if __name__ == "__main__":
    main()
