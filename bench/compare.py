#!/usr/bin/env python3
"""Peer comparison: wmreplay respond against the same replay contract in
Node.js (the test oracle), jq, DuckDB and plain Python, on generated logs.

    python3 bench/compare.py [--sizes 100MiB,1GiB] [--runs 3] [--out DIR]

For each size it generates the log with `wmreplay gen --seed 1` (once; kept
in target/bench-data/), then runs every tool's `respond` as a whole process
under /usr/bin/time -v, stdout to /dev/null, several times, and prints a
Markdown table (also written to OUT/compare.md) with the median wall time,
the ratio to wmreplay, the peak RSS, whether the tool's stats match the
oracle's and, on the smallest size, whether its body is byte-identical to the
oracle's. See bench/README.md.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "bench")
WMREPLAY = os.path.join(REPO, "target", "dist", "wmreplay")
TEXT = "What was I working on yesterday?"
STAT_KEYS = ("total_lines", "parsed_entries", "skipped_invalid_json", "skipped_invalid_shape")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- setup

def sh(cmd, **kw):
    log("$ " + " ".join(shlex.quote(c) for c in cmd))
    return subprocess.run(cmd, check=True, **kw)


def ensure_tools(build):
    apt = []
    if not shutil.which("jq"):
        apt.append("jq")
    if not os.path.exists("/usr/bin/time"):
        apt.append("time")
    if not shutil.which("node"):
        apt.append("nodejs")
    if apt:
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        sh(sudo + ["apt-get", "update"])
        sh(sudo + ["apt-get", "install", "-y"] + apt)
    try:
        import duckdb  # noqa: F401
    except ImportError:
        sh([sys.executable, "-m", "pip", "install", "duckdb"])
    if build:
        sh(["cargo", "build", "--profile", "dist"], cwd=REPO)
    if not os.path.exists(WMREPLAY):
        sys.exit(f"{WMREPLAY} is missing: run `cargo build --profile dist`")


def parse_size(s):
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", s)
    if not m:
        raise ValueError(s)
    unit = m.group(2).lower()
    mult = {"": 1, "b": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1 << 20, "mib": 1 << 20,
            "mb": 10**6, "g": 1 << 30, "gib": 1 << 30, "gb": 10**9}[unit]
    return round(float(m.group(1)) * mult)


def corpus(data_dir, size, seed):
    """Generates (once) the log for a size; a marker file records what was made."""
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, f"wm-{size}-seed{seed}.log")
    marker = path + ".done"
    if os.path.exists(path) and os.path.exists(marker):
        try:
            with open(marker) as f:
                m = json.load(f)
            if m.get("bytes") == os.path.getsize(path) and m.get("size") == size and m.get("seed") == seed:
                return path
        except (OSError, ValueError):
            pass
    sh([WMREPLAY, "gen", path, "--size", size, "--seed", str(seed)])
    with open(marker, "w") as f:
        json.dump({"size": size, "seed": seed, "bytes": os.path.getsize(path)}, f)
    return path


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


# ---------------------------------------------------------------- tools

def tools():
    py = sys.executable
    return [
        ("wmreplay", lambda p: [WMREPLAY, "respond", p, "--text", TEXT]),
        ("node (oracle)", lambda p: ["node", os.path.join(REPO, "tests", "oracle", "replay.js"), "respond", p, "--text", TEXT]),
        ("python json", lambda p: [py, os.path.join(BENCH, "peers", "replay.py"), "respond", p, "--text", TEXT]),
        ("duckdb", lambda p: [py, os.path.join(BENCH, "peers", "replay_duckdb.py"), "respond", p, "--text", TEXT]),
        ("jq", lambda p: ["jq", "-cnRj", "--arg", "text", TEXT, "-f", os.path.join(BENCH, "peers", "replay.jq"), p]),
    ]


# Known reasons for a body that differs from the oracle's, shown when it does.
NOTES = {
    "jq": "jq 1.6 with -R reads a line longer than 4095 bytes in fgets() chunks and decodes "
          "each chunk as UTF-8 on its own, so a multi-byte character that straddles a chunk "
          "boundary becomes U+FFFD (fixed in jq 1.7). The generated logs have a few such long "
          "lines; the characters are inside JSON strings, so the stats are unaffected.",
    "duckdb": "DuckDB's JSON functions (yyjson) accept NaN and trailing commas, reject lone "
              "surrogate escapes and read the first of duplicate keys; see bench/peers/replay_duckdb.py.",
    "python json": "See bench/peers/replay.py for the known differences.",
}


def find_stats(text):
    """The last stats object in a tool's stderr."""
    found = None
    for m in re.finditer(r'\{"total_lines"[^{}]*\}', text):
        try:
            obj = json.loads(m.group(0))
            found = {k: obj[k] for k in STAT_KEYS}
        except (ValueError, KeyError):
            pass
    return found


def failure_reason(rc, err):
    lines = [l.strip() for l in err.splitlines() if l.strip()]
    pick = None
    for l in lines:
        if re.search(r"Error|error|FATAL|out of memory|Killed", l):
            pick = l
            if re.search(r"RangeError|ERR_|heap out of memory|Invalid string length", l):
                break
    pick = pick or (lines[-1] if lines else "")
    pick = re.sub(r"\s+", " ", pick)[:140]
    sig = f"signal {-rc}" if rc < 0 else f"exit {rc}"
    return f"{sig}: {pick}" if pick else sig


def run_once(cmd, stdout_path, timeout):
    """One timed run. Returns dict(wall, rss_kib, rc, err, timeout)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time", delete=False) as tf:
        time_file = tf.name
    err_file = tempfile.TemporaryFile()
    out = open(stdout_path, "wb")
    full = ["/usr/bin/time", "-v", "-o", time_file] + cmd
    t0 = time.perf_counter()
    proc = subprocess.Popen(full, stdout=out, stderr=err_file, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    # A blocking wait returns as the process exits. (`proc.wait(timeout=...)`
    # polls with sleeps that double up to 50 ms: a 0.09 s run was timed as
    # the next poll, 0.114 s.) A timer kills the run instead.
    fired = threading.Event()

    def kill():
        fired.set()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    rc = proc.wait()
    wall = time.perf_counter() - t0
    timer.cancel()
    timed_out = fired.is_set()
    out.close()
    err_file.seek(0)
    err = err_file.read().decode("utf-8", "replace")
    err_file.close()
    with open(time_file) as f:
        tv = f.read()
    os.unlink(time_file)
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", tv)
    rss = int(m.group(1)) if m else None
    m = re.search(r"Exit status: (\d+)", tv)
    if m and rc == 0:
        rc = int(m.group(1))
    if "Command terminated by signal" in tv:
        s = re.search(r"Command terminated by signal (\d+)", tv)
        rc = -int(s.group(1))
    return {"wall": wall, "rss_kib": rss, "rc": rc, "err": err, "timeout": timed_out}


def measure(name, cmd, runs, timeout, budget):
    """Up to `runs` runs; stops early if the next run would pass the budget."""
    res = {"walls": [], "rss": [], "stats": None, "fail": None, "planned": runs}
    spent = 0.0
    for i in range(runs):
        if i > 0 and spent + statistics.median(res["walls"]) > budget:
            log(f"  {name}: stopping after {i} run(s) (budget {budget:.0f} s)")
            break
        log(f"  {name}: run {i + 1}/{runs}")
        r = run_once(cmd, os.devnull, timeout)
        spent += r["wall"]
        if r["timeout"]:
            res["fail"] = f"timeout (> {timeout:.0f} s)"
            res["fail_rss"] = r["rss_kib"]
            break
        if r["rc"] != 0:
            res["fail"] = f"fails after {r['wall']:.0f} s: " + failure_reason(r["rc"], r["err"])
            res["fail_rss"] = r["rss_kib"]
            log("    " + res["fail"])
            break
        res["walls"].append(r["wall"])
        if r["rss_kib"] is not None:
            res["rss"].append(r["rss_kib"])
        if res["stats"] is None:
            res["stats"] = find_stats(r["err"])
        log(f"    {r['wall']:.3f} s, {r['rss_kib'] / 1024:.0f} MiB")
    return res


def wmreplay_stats(path):
    out = subprocess.run([WMREPLAY, "stats", path], check=True, capture_output=True, text=True).stdout
    obj = json.loads(out)
    return {k: obj[k] for k in STAT_KEYS}


def body_check(ts, path, timeout, out_dir):
    """Runs each tool once with stdout to a file; compares with the oracle's body."""
    bodies = {}
    fails = {}
    for name, mk in ts:
        dest = os.path.join(out_dir, "body-" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + ".json")
        log(f"  body check: {name}")
        r = run_once(mk(path), dest, timeout)
        if r["timeout"] or r["rc"] != 0:
            fails[name] = "timeout" if r["timeout"] else failure_reason(r["rc"], r["err"])
            os.unlink(dest)
        else:
            bodies[name] = dest
    ref = "node (oracle)" if "node (oracle)" in bodies else "wmreplay"
    result = {}
    for name, _ in ts:
        if name not in bodies:
            result[name] = "n.a. (run failed)"
            continue
        if name == ref:
            result[name] = "reference" if ref == "node (oracle)" else "reference*"
            continue
        if ref not in bodies:
            result[name] = "n.a."
            continue
        a, b = bodies[name], bodies[ref]
        same, first = files_equal(a, b)
        result[name] = "yes" if same else f"no (first difference at byte {first})"
    for f in bodies.values():
        os.unlink(f)
    return result, ref


def files_equal(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        pos = 0
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                n = min(len(x), len(y))
                i = next((k for k in range(n) if x[k] != y[k]), n)
                return False, pos + i + 1
            if not x:
                return True, None
            pos += len(x)


# ---------------------------------------------------------------- report

def machine():
    info = {}
    info["nproc"] = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name"):
                    model = l.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["cpu"] = model or platform.processor()
    try:
        with open("/proc/meminfo") as f:
            for l in f:
                if l.startswith("MemTotal"):
                    info["memory"] = f"{int(l.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    info["kernel"] = platform.release()

    def ver(cmd):
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            return (p.stdout or p.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "missing"

    info["wmreplay"] = ver([WMREPLAY, "--version"])
    info["git"] = ver(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(["git", "--no-optional-locks", "-C", REPO, "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
    if dirty:
        info["git"] += " (with uncommitted changes)"
    info["node"] = ver(["node", "--version"])
    info["jq"] = ver(["jq", "--version"])
    info["python"] = platform.python_version()
    info["duckdb"] = ver([sys.executable, "-c", "import duckdb; print(duckdb.__version__)"])
    return info


def fmt_size(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100MiB,1GiB", help="comma-separated log sizes (default 100MiB,1GiB)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per tool and size (default 3)")
    ap.add_argument("--out", default=os.path.join(REPO, "target", "bench-compare"),
                    help="where compare.md goes (default target/bench-compare)")
    ap.add_argument("--data", default=os.path.join(REPO, "target", "bench-data"),
                    help="where generated logs are kept (default target/bench-data)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run before a tool is marked timeout (default 900)")
    ap.add_argument("--budget", type=float, default=300,
                    help="seconds per tool and size: no further run starts once the runs so far "
                         "plus one more would pass it, so slow tools get fewer runs (default 300)")
    ap.add_argument("--tools", default="", help="comma-separated subset of tool names (default all)")
    ap.add_argument("--no-build", action="store_true", help="skip cargo build --profile dist")
    ap.add_argument("--no-body-check", action="store_true", help="skip the byte-for-byte body check")
    args = ap.parse_args()

    ensure_tools(not args.no_build)
    os.makedirs(args.out, exist_ok=True)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    sizes.sort(key=parse_size)
    ts = tools()
    if args.tools:
        want = [t.strip() for t in args.tools.split(",")]
        ts = [t for t in ts if any(w in t[0] for w in want)]
        if not any(t[0] == "wmreplay" for t in ts):
            ts.insert(0, tools()[0])
    started = datetime.datetime.now().astimezone()

    rows = []
    footnotes = []
    body = {}
    body_ref = None
    commands = {}
    for i, size in enumerate(sizes):
        path = corpus(args.data, size, args.seed)
        nbytes = os.path.getsize(path)
        log(f"== {size}: {path} ({nbytes} bytes)")
        warm(path)
        if i == 0 and not args.no_body_check:
            body, body_ref = body_check(ts, path, args.timeout, args.out)
            warm(path)
        results = {}
        for name, mk in ts:
            cmd = mk(path)
            commands[name] = cmd
            results[name] = measure(name, cmd, args.runs, args.timeout, args.budget)
        ref_stats = results.get("node (oracle)", {}).get("stats")
        ref_is_oracle = ref_stats is not None
        wm_stats = wmreplay_stats(path)
        results["wmreplay"]["stats"] = wm_stats
        if not ref_is_oracle:
            ref_stats = wm_stats
            why = results.get("node (oracle)", {}).get("fail") or "not run"
            footnotes.append(f"At {size} the oracle did not finish ({why}); the other tools' stats are "
                             f"compared with wmreplay's ({json.dumps(wm_stats)}), marked *.")
        wm_med = statistics.median(results["wmreplay"]["walls"]) if results["wmreplay"]["walls"] else None
        for name, _ in ts:
            r = results[name]
            row = {"tool": name, "size": f"{size} ({nbytes:,} B)", "bytes": nbytes}
            if r["walls"]:
                med = statistics.median(r["walls"])
                n = len(r["walls"])
                row["runs"] = f"{n}" if n == r["planned"] else f"{n} of {r['planned']} (budget)"
                # Three decimals: wmreplay's runs take tens of milliseconds, and the
                # ratio column is computed from the unrounded medians.
                row["wall"] = f"{med:.3f}"
                row["ratio"] = f"{med / wm_med:.1f}x" if wm_med else "n.a."
                peak = max(r["rss"]) / 1024 if r["rss"] else None
                row["rss"] = f"{peak:.0f}" if peak is not None else "n.a."
                row["rss_ratio"] = f"{peak * (1 << 20) / nbytes:.2f}" if peak is not None else "n.a."
            else:
                row.update(runs="0", wall=r["fail"] or "n.a.", ratio="—", rss="—", rss_ratio="—")
                if r.get("fail_rss"):
                    row["rss"] = f"({r['fail_rss'] / 1024:.0f} when it failed)"
            if r["fail"] and r["walls"]:
                row["wall"] += f" ({r['fail']} on a later run)"
            st = r["stats"]
            if name == "node (oracle)" and ref_is_oracle:
                row["match"] = "reference"
            elif name == "wmreplay" and not ref_is_oracle:
                row["match"] = "reference*"
            elif st is None:
                row["match"] = "n.a."
            else:
                ok = st == ref_stats
                row["match"] = ("yes" if ok else "no: " + json.dumps(st)) + ("" if ref_is_oracle else "*")
            row["body"] = body.get(name, "n.a.") if i == 0 else "—"
            rows.append(row)
        log(f"   stats reference ({'oracle' if ref_is_oracle else 'wmreplay'}): {json.dumps(ref_stats)}")

    info = machine()
    finished = datetime.datetime.now().astimezone()
    out = []
    out.append("# wmreplay peer comparison\n")
    out.append(f"Run {started:%Y-%m-%d %H:%M %Z} – {finished:%H:%M %Z} with "
               f"`python3 bench/compare.py --sizes {','.join(sizes)} --runs {args.runs}"
               f"{'' if args.budget == 300 else f' --budget {args.budget:g}'}"
               f"{'' if args.timeout == 900 else f' --timeout {args.timeout:g}'}`.\n")
    out.append("| tool | log size | runs | median wall (s) | ratio to wmreplay | peak RSS (MiB) | RSS / log size | stats match oracle | body = oracle |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        out.append(f"| {r['tool']} | {r['size']} | {r['runs']} | {r['wall']} | {r['ratio']} | {r['rss']} | "
                   f"{r['rss_ratio']} | {r['match']} | {r['body']} |")
    out.append("")
    out.append("Wall time: median of the runs, measured around the whole process (start to exit), "
               "stdout to /dev/null, log in the page cache. Peak RSS: the largest "
               "\"Maximum resident set size\" of /usr/bin/time -v over the runs. "
               f"Every tool gets up to {args.runs} runs; a tool stops early when its runs so far plus one more "
               f"would pass {args.budget:g} s for that size (\"n of m (budget)\"). "
               f"A run over {args.timeout:g} s is killed (\"timeout\").")
    if sizes and not args.no_body_check:
        out.append(f"\"body = oracle\": each tool run once more on the smallest log ({sizes[0]}) with stdout "
                   f"to a file, compared byte for byte with the {'oracle' if body_ref == 'node (oracle)' else 'wmreplay (*)'}'s body.")
    for f in footnotes:
        out.append("")
        out.append("\\* " + f)
    notes = [NOTES[name] for name, _ in ts if name in NOTES and str(body.get(name, "")).startswith("no")]
    if notes:
        out.append("")
        out.append("Why a body differs: " + " ".join(notes))
    out.append("")
    out.append("## Machine\n")
    for k in ("nproc", "cpu", "memory", "kernel", "wmreplay", "git", "node", "jq", "python", "duckdb"):
        out.append(f"- {k}: {info.get(k, 'n.a.')}")
    out.append("")
    out.append("## Commands\n")
    out.append("Each under `/usr/bin/time -v -o TIMEFILE`, stdout to /dev/null; LOG is the generated log "
               f"(`wmreplay gen LOG --size SIZE --seed {args.seed}`, kept in {os.path.relpath(args.data, REPO)}/).\n")
    out.append("```")
    for name, cmd in commands.items():
        shown = [c if not c.endswith(".log") else "LOG" for c in cmd]
        shown = [os.path.relpath(c, REPO) if c.startswith(REPO) else c for c in shown]
        out.append(f"{name}: " + " ".join(shlex.quote(c) for c in shown))
    out.append(f"wmreplay stats (for its stats): target/dist/wmreplay stats LOG")
    out.append("```")
    text = "\n".join(out) + "\n"
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(text)
    print(text)
    log(f"written to {os.path.join(args.out, 'compare.md')}")


if __name__ == "__main__":
    main()
