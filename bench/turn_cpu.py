#!/usr/bin/env python3
"""Keyed against unkeyed turns, counted from the server itself.

Runs `cargo bench --bench turns` (its compiled binary, built by a `cargo bench
--bench turns` before) once per route and round, the routes interleaved, on
the 1 MiB log with a 100k-token window, and reads the server while its 8
clients run: its turns from /metrics (`wmreplay_turns_total`) and its CPU
time from /proc/PID/stat, over the 8 s of the run where turns came fastest.
A turns-per-second ratio alone moves with the machine's neighbours; the CPU
a turn takes on the server does not, much.

    cargo build --profile bench && cargo bench --bench turns --no-run
    python3 bench/turn_cpu.py --rounds 3 respond anthropic-sdk

Prints each run, then the medians: the second route's turns/s against the
first's (pairwise), its 8-client overhead p50 minus the first's, and each
route's sequential overhead p50 and server CPU per turn.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPS = os.path.join(ROOT, "target", "release", "deps")


def bench_binary():
    """The newest compiled turns bench."""
    found = [
        os.path.join(DEPS, f)
        for f in os.listdir(DEPS) if f.startswith("turns-") and "." not in f
    ] if os.path.isdir(DEPS) else []
    if not found:
        sys.exit("no turns bench built: cargo bench --bench turns --no-run")
    return max(found, key=os.path.getmtime)


def server_of(bench_pid):
    """(pid, address) of the `wmreplay serve` the bench started, if any."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == bench_pid and len(argv) > 2 and argv[1] == b"serve" and b"--addr" in argv:
            return int(pid), argv[argv.index(b"--addr") + 1].decode()
    return None


def sample(pid, addr, tick):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / tick
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=2) as r:
        text = r.read().decode()
    turns = sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("wmreplay_turns_total")
    )
    return time.monotonic(), cpu, turns


def run(binary, via, secs):
    """One bench run of `via`: its table row's figures and the server's."""
    cmd = [binary, "--bench", "--sizes", "1MiB", "--select", "window", "--via", via,
           "--secs", str(secs), "--turns", "40", "--rounds", "1"]
    bench = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    tick = os.sysconf("SC_CLK_TCK")
    server, series = None, []
    while bench.poll() is None:
        try:
            server = server or server_of(bench.pid)
            if server:
                series.append(sample(*server, tick))
        except (OSError, ValueError):
            server = None
        time.sleep(0.25)
    out = bench.stdout.read()
    if bench.returncode != 0:
        sys.exit(f"the bench failed:\n{out[-2000:]}")
    row = next((line for line in out.splitlines() if line.startswith("| 1MiB")), None)
    if row is None:
        sys.exit(f"no result row in the bench's output:\n{out[-2000:]}")
    cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
    # log, selection, route, request, first context, turn, direct, overhead,
    # overhead (8 clients), turns/s (8 clients), ...
    sequential = float(cells[7].removesuffix(" ms"))
    loaded = float(cells[8].removesuffix(" ms"))
    best = None
    for i, (t0, c0, n0) in enumerate(series):
        for t1, c1, n1 in series[i:]:
            if t1 - t0 >= 8:
                if n1 > n0 and (best is None or (n1 - n0) / (t1 - t0) > best[0]):
                    best = ((n1 - n0) / (t1 - t0), (c1 - c0) * 1000 / (n1 - n0))
                break
    if best is None:
        sys.exit(f"{via}: the server was not read for 8 s (--secs too short?)")
    return {"via": via, "turns/s": best[0], "cpu ms": best[1],
            "overhead": sequential, "overhead 8": loaded}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="the reference route (e.g. respond)")
    ap.add_argument("other", help="the route compared with it (e.g. anthropic-sdk)")
    ap.add_argument("--rounds", type=int, default=3, help="pairs of runs (default 3)")
    ap.add_argument("--secs", type=float, default=14, help="8-client phase per run")
    a = ap.parse_args()
    binary = bench_binary()
    pairs = []
    for r in range(a.rounds):
        # Each pair in alternating order, so neither route always runs first.
        order = [a.base, a.other] if r % 2 == 0 else [a.other, a.base]
        got = {}
        for via in order:
            got[via] = run(binary, via, a.secs)
            g = got[via]
            print(f"{via:>18}: {g['turns/s']:7.0f} turns/s, {g['cpu ms']:.3f} ms CPU a turn, "
                  f"overhead p50 +{g['overhead']:.2f} ms, 8 clients +{g['overhead 8']:.2f} ms",
                  flush=True)
        pairs.append((got[a.base], got[a.other]))
    med = statistics.median
    print(f"\nmedians of {len(pairs)} pairs:")
    print(f"  {a.other} / {a.base} turns/s: "
          f"{med(o['turns/s'] / b['turns/s'] for b, o in pairs):.2f}x "
          f"({min(o['turns/s'] / b['turns/s'] for b, o in pairs):.2f}-"
          f"{max(o['turns/s'] / b['turns/s'] for b, o in pairs):.2f})")
    print(f"  8-client overhead p50, {a.other} minus {a.base}: "
          f"{med(o['overhead 8'] - b['overhead 8'] for b, o in pairs):+.2f} ms")
    for i, name in enumerate([a.base, a.other]):
        print(f"  {name}: sequential overhead p50 +{med(p[i]['overhead'] for p in pairs):.2f} ms, "
              f"CPU {med(p[i]['cpu ms'] for p in pairs):.3f} ms a turn")


if __name__ == "__main__":
    main()
