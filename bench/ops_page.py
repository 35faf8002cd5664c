"""The ops page's weight and load time: its JS/CSS bytes, and how long Chromium takes to show it.

    .venv/bin/python bench/ops_page.py [--loads 10]

Bytes: every script and style sheet the page loads (our own modules, and the vendored
uPlot), raw and gzip-compressed (what a compressing proxy would send; the gateway itself
sends them uncompressed). Load time: Debian's headless Chromium (driven by Playwright, as
the browser tests do) opens `/ui` on a gateway with two scripted models and some Activity
history, in a fresh context each time (nothing cached), `--loads` times; the medians of
(a) the `load` event, (b) the models table filled from `/ui/api/models` and (c) the first
plot drawn from `/ui/api/history`, measured from the navigation's start.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import time

import httpx
from common import REPO, Gateway, fmt, median, report, table
from playwright.sync_api import sync_playwright

CONFIG = """
server: {host: 127.0.0.1}
models:
  - id: echo
    engine: scripted
    script: {reply: "hello from echo"}
  - id: other
    engine: scripted
"""
STATIC = REPO / "gateway" / "static"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def page_files() -> list[tuple[str, int, int]]:
    """(name, bytes, gzip bytes) of each script and style sheet the page loads."""
    found = []
    for path in sorted(STATIC.iterdir()):
        if path.suffix in (".js", ".css"):
            data = path.read_bytes()
            found.append((path.name, len(data), len(gzip.compress(data, 9))))
    return found


def load_times(url: str, loads: int) -> list[tuple[float, float, float]]:
    times = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for _ in range(loads + 1):  # the first warms the gateway and the browser: dropped
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            started = time.perf_counter()
            page.goto(f"{url}/ui", wait_until="load")
            loaded = time.perf_counter()
            page.wait_for_selector("tr[data-model=other]")
            models = time.perf_counter()
            page.wait_for_selector("[data-chart=tokens] canvas")
            plotted = time.perf_counter()
            times.append(((loaded - started), (models - started), (plotted - started)))
            context.close()
        browser.close()
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=10)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with Gateway(CONFIG, "ops-page") as gateway:
        for _ in range(50):  # some Activity history for the page to read
            body = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
            httpx.post(f"{gateway.url}/v1/chat/completions", json=body).raise_for_status()
        times = load_times(gateway.url, args.loads)
        platform_path = gateway.platform()

    files = page_files()
    rows = [[name, size, packed] for name, size, packed in files]
    ours = [f for f in files if not f[0].startswith("uplot")]
    rows.append(["ours, total", sum(f[1] for f in ours), sum(f[2] for f in ours)])
    rows.append(["all, total", sum(f[1] for f in files), sum(f[2] for f in files)])
    body = table(["file", "bytes", "gzip -9 bytes"], rows)
    ms = [[fmt(median([t[i] * 1000 for t in times]), 0) for i in range(3)]]
    body += "\n\n" + table(
        ["`load` event ms (median)", "models shown ms (median)", "first plot drawn ms (median)"],
        ms,
    )
    report(
        "Ops page: size and load time",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=(
            f"{args.loads} loads of /ui in fresh browser contexts (nothing cached), after one "
            "warm-up; headless Chromium on the same cores as the gateway; loopback HTTP; 50 "
            "requests of Activity history; index.html not counted in the bytes."
        ),
    )


if __name__ == "__main__":
    main()
