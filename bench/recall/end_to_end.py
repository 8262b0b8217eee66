#!/usr/bin/env python3
"""Does the evidence reach the model? For every question of a recall set (gen.py's or
gen_notes.py's), the request `wmreplay respond LOG --text QUESTION --recall K --tail N`
builds is searched for the question's evidence turns (by their dia_id): the newest N
records replayed as history, and the K records recall adds for the question.

    python3 bench/recall/gen.py && python3 bench/recall/end_to_end.py
    python3 bench/recall/end_to_end.py --data bench/recall/data-notes --recall 10 --tail 20
    python3 bench/recall/end_to_end.py --respond-args '--embed-upstream URL --embed-model M'

Prints, overall and per category: the share of questions whose evidence all reaches the
model, the share with at least one evidence turn there, and the share of evidence turns
there. Each log is copied to a temporary directory first, so that its search index is
built there, fresh, not next to the data.
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CATS = ["single-hop", "multi-hop", "temporal", "open-domain"]
DIA = re.compile(r'\\?"dia_id\\?":\s*\\?"(D\d+:\d+)')


def default_bin():
    for b in ("release", "debug"):
        p = os.path.join(ROOT, "target", b, "wmreplay")
        if os.path.exists(p):
            return p
    sys.exit("no wmreplay binary: cargo build --release (or give --bin)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(HERE, "data"), help="a recall set (default bench/recall/data)")
    ap.add_argument("--bin", default=None, help="the wmreplay binary (default target/release, then target/debug)")
    ap.add_argument("--recall", type=int, default=10, help="K of --recall (default 10)")
    ap.add_argument("--tail", type=int, default=20, help="N of --tail (default 20)")
    ap.add_argument("--jobs", type=int, default=2, help="questions at once (default 2)")
    ap.add_argument("--respond-args", default="", help="more arguments for respond, e.g. the embedding model's")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    a = ap.parse_args()
    binary = a.bin or default_bin()
    qpath = os.path.join(a.data, "questions.jsonl")
    if not os.path.exists(qpath):
        sys.exit(f"{qpath} is missing: run bench/recall/gen.py (or gen_notes.py) first")
    with open(qpath, encoding="utf-8") as fh:
        qs = [json.loads(line) for line in fh if line.strip()]
    extra = shlex.split(a.respond_args)
    tmp = tempfile.mkdtemp(prefix="recall-e2e-")
    try:
        for conv in sorted({q["conv"] for q in qs}):
            shutil.copy(os.path.join(a.data, conv + ".jsonl"), os.path.join(tmp, conv + ".jsonl"))

        def run(q):
            log = os.path.join(tmp, q["conv"] + ".jsonl")
            p = subprocess.run([binary, "respond", log, "--text", q["question"], "--recall", str(a.recall),
                                "--tail", str(a.tail), *extra], capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"wmreplay respond failed ({p.returncode}) for {q['question']!r}: {p.stderr.strip()}")
            return set(DIA.findall(p.stdout))

        # One question per log first: each index is built once, before the parallel runs.
        firsts = {}
        for q in qs:
            firsts.setdefault(q["conv"], q)
        for q in firsts.values():
            run(q)
        with cf.ThreadPoolExecutor(a.jobs) as ex:
            seen = list(ex.map(run, qs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    rows = {}
    for cat in ["all"] + CATS:
        sel = [(q, s) for q, s in zip(qs, seen) if cat == "all" or q["category"] == cat]
        if not sel:
            continue
        n = len(sel)
        rows[cat] = {
            "questions": n,
            "all_evidence": sum(set(q["evidence"]) <= s for q, s in sel) / n,
            "any_evidence": sum(bool(set(q["evidence"]) & s) for q, s in sel) / n,
            "evidence_turns": sum(len(set(q["evidence"]) & s) / len(q["evidence"]) for q, s in sel) / n,
        }
    if a.json:
        print(json.dumps({"data": a.data, "recall": a.recall, "tail": a.tail, "respond_args": a.respond_args,
                          "rows": rows}))
        return
    print(f"respond --recall {a.recall} --tail {a.tail} {a.respond_args}".rstrip() + f" on {a.data}")
    print("| category | questions | all evidence | any evidence | evidence turns |")
    print("|---|---:|---:|---:|---:|")
    for cat, r in rows.items():
        print(f"| {cat} | {r['questions']} | {100 * r['all_evidence']:.1f} | {100 * r['any_evidence']:.1f} "
              f"| {100 * r['evidence_turns']:.1f} |")


if __name__ == "__main__":
    main()
