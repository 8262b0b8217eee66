#!/usr/bin/env python3
"""Prints the `cargo bench --bench replay` results as a Markdown table.

Reads target/criterion/replay_<size>/<bench>/new/{estimates,benchmark}.json:
the median time per iteration and the throughput in bytes, so the table shows
what criterion measured (median of its samples) as seconds and MB/s.
"""
import json
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parent.parent / "target" / "criterion"
rows = []
for bench in sorted(root.glob("replay_*/**/new/benchmark.json")):
    meta = json.loads(bench.read_text())
    est = json.loads((bench.parent / "estimates.json").read_text())
    median_ns = est["median"]["point_estimate"]
    lo = est["median"]["confidence_interval"]["lower_bound"]
    hi = est["median"]["confidence_interval"]["upper_bound"]
    thr = meta.get("throughput") or {}
    nbytes = thr.get("Bytes") or thr.get("BytesDecimal")
    group = meta["group_id"].split("/", 1)[1] if "/" in meta["group_id"] else meta["group_id"]
    name = meta["function_id"] + ("/" + meta["value_str"] if meta.get("value_str") else "")
    mbs = nbytes / (median_ns / 1e9) / 1e6 if nbytes else float("nan")
    rows.append((group, name, median_ns / 1e9, lo / 1e9, hi / 1e9, mbs))

def size_key(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if s.endswith(u):
            return float(s[: -len(u)]) * m
    return 0

rows.sort(key=lambda r: (size_key(r[0]), r[1]))
print("| log | benchmark | median time (s) | 95% CI of median (s) | MB/s of log |")
print("|---|---|---|---|---|")
for g, n, t, lo, hi, mbs in rows:
    print(f"| {g} | {n} | {t:.4f} | {lo:.4f}–{hi:.4f} | {mbs:,.0f} |")
if not rows:
    sys.exit("no results under target/criterion: run `cargo bench --bench replay` first")
