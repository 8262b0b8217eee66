"""In-process speed of the Python package against plain Python.

    python3 bindings/python/bench.py [SIZE]      # default 100MiB

Generates a log with the CLI (`wmreplay gen LOG --size SIZE --seed 1`, kept in
target/bench-data/), then times building the request body three ways, each run
in a fresh process (so its peak memory is its own; one warm-up call, then the
timed one), interleaved, median of 3:
- `wmreplay.replay(path).request_body(text)`: the package;
- the plain-Python version (json.loads per line, sort, json.dumps; tests/oracle.py);
- `wmreplay.replay(path).messages()`: the package building the message dicts
  (the Anthropic shape: a dict, a one-block list and a block dict per message).
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def one(kind, path):
    sys.path.insert(0, str(HERE / "tests"))

    def run():
        if kind == "wmreplay.request_body":
            import wmreplay
            return wmreplay.replay(path).request_body("What next?", session_id="s-1")
        if kind == "wmreplay.messages":
            import wmreplay
            return wmreplay.replay(path).messages()
        import oracle
        return oracle.request_body(path, "What next?", "s-1")

    # Once to warm up (thread pools, the page cache), then timed: a respond
    # path calls it on every turn.
    run()
    t = time.perf_counter()
    out = run()
    elapsed = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"s": elapsed, "peak": peak, "n": len(out)}))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        one(sys.argv[2], sys.argv[3])
        return
    size = sys.argv[1] if len(sys.argv) > 1 else "100MiB"
    data = ROOT / "target" / "bench-data"
    data.mkdir(parents=True, exist_ok=True)
    log = data / f"py-{size}-seed1.log"
    if not log.exists():
        subprocess.run(["cargo", "run", "--release", "--quiet", "--", "gen", str(log),
                        "--size", size, "--seed", "1"], cwd=ROOT, check=True)
    kinds = ["wmreplay.request_body", "plain Python (json)", "wmreplay.messages"]
    runs = {k: [] for k in kinds}
    for _ in range(3):
        for k in kinds:
            out = subprocess.run([sys.executable, __file__, "--one", k, str(log)],
                                 check=True, capture_output=True, text=True).stdout
            runs[k].append(json.loads(out))
    mib = log.stat().st_size / 2**20
    base = statistics.median(r["s"] for r in runs["plain Python (json)"])
    print(f"log: {log.name}, {mib:.0f} MiB; median of 3 interleaved runs, each in its own process")
    print("| what | seconds | vs plain Python | peak RSS (MiB) | peak / log |")
    print("|---|---:|---:|---:|---:|")
    for k in kinds:
        s = statistics.median(r["s"] for r in runs[k])
        peak = max(r["peak"] for r in runs[k]) / 2**20
        print(f"| {k} | {s:.3f} | {base / s:.1f}× | {peak:.0f} | {peak / mib:.2f}× |")


if __name__ == "__main__":
    main()
