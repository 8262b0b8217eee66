#!/usr/bin/env python3
"""The memory inspector's targets on a large log, in headless Chromium.

    python3 bench/inspector.py [--log PATH] [--size 1GiB] [--bin target/dist/wmreplay] [--runs 3]

Generates the log with `wmreplay gen` unless --log names one (kept in
target/bench-data/), then, for each run, starts `serve --max-tokens-window
100000` on it and measures: the time from /readyz answering to the
timeline's first painted row (the page's first request builds its index of
the log), a warm reload's, timeline pages at random rows, and the view of a
turn (its request replayed, its 100k-token window counted) for the newest
text_input and one in the middle. Prints the median of the runs. Needs
Playwright for Python (`bash .ci/browser-tests.sh` installs it into
target/pw-venv) and Debian's chromium.
"""

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import time
import urllib.request

from playwright.sync_api import sync_playwright

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    t = time.monotonic()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = json.loads(r.read())
    return body, time.monotonic() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log")
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "dist", "wmreplay"))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    log = args.log or os.path.join(ROOT, "target", "bench-data", f"bench-{args.size}-seed1.log")
    if not os.path.exists(log):
        os.makedirs(os.path.dirname(log), exist_ok=True)
        subprocess.run([args.bin, "gen", "--size", args.size, log], check=True)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    got = {k: [] for k in ("ready", "first_paint", "warm_paint", "page", "turn_last", "turn_mid", "turn_last_replay")}
    for run in range(args.runs):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        t0 = time.monotonic()
        srv = subprocess.Popen([args.bin, "serve", "--log", log, "--addr", f"127.0.0.1:{port}",
                                "--max-tokens-window", "100000"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/readyz", timeout=1) as r:
                        if r.status == 200:
                            break
                except Exception:
                    time.sleep(0.02)
            got["ready"].append(time.monotonic() - t0)
            with sync_playwright() as pw:
                b = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
                page = b.new_page(viewport={"width": 1400, "height": 860})
                t = time.monotonic()
                page.goto(f"{base}/ui#timeline")
                page.wait_for_selector("#tl-rows .row:not(.pending)", timeout=120_000)
                got["first_paint"].append(time.monotonic() - t)
                t = time.monotonic()
                page.reload()
                page.wait_for_selector("#tl-rows .row:not(.pending)", timeout=120_000)
                got["warm_paint"].append(time.monotonic() - t)
                b.close()
            first, _ = get(f"{base}/v1/timeline?limit=1")
            total = first["total"]
            rng = random.Random(run)
            for _ in range(10):
                _, dt = get(f"{base}/v1/timeline?from={rng.randrange(total)}&limit=100")
                got["page"].append(dt)
            inputs = []
            page_at = max(0, total - 2000)
            while len(inputs) < 1:
                p, _ = get(f"{base}/v1/timeline?from={page_at}&limit=200&kinds=text_input")
                inputs += p["records"]
                page_at = max(0, page_at - 20000)
            last = inputs[-1]["offset"]
            mid, _ = get(f"{base}/v1/timeline?from={total // 2}&limit=200&kinds=text_input")
            view, dt = get(f"{base}/v1/inspect/turn?offset={last}")
            got["turn_last"].append(dt)
            got["turn_last_replay"].append(view["replay_ms"] / 1000)
            _, dt = get(f"{base}/v1/inspect/turn?offset={mid['records'][0]['offset']}")
            got["turn_mid"].append(dt)
            if run == 0:
                print(f"log {log}: {os.path.getsize(log) / 2**30:.2f} GiB, {total:,} records; "
                      f"the last turn's window: {view['window']['selected_records']:,} records, "
                      f"{view['window']['window_tokens']:,} tokens")
        finally:
            srv.terminate()
            srv.wait(timeout=30)
    for k, v in got.items():
        print(f"{k:18} median {statistics.median(v) * 1000:8.0f} ms   (runs: {', '.join(f'{x * 1000:.0f}' for x in v)})")


if __name__ == "__main__":
    main()
