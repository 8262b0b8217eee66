#!/usr/bin/env python3
"""Retrieval evaluation on the generated long-conversation benchmark (gen.py).

For every question, each engine searches that question's conversation (one log per
conversation) with the question as it is, and returns its 50 best turns. A question's
recall@k is the share of its evidence turns in the top k; MRR is 1/rank of the first
evidence turn in the top 50 (0 when none is there). Both are averaged over questions,
overall and per category.

    python3 bench/recall/gen.py && python3 bench/recall/eval.py
    python3 bench/recall/eval.py --engines wmreplay,fts5 --bin target/debug/wmreplay --json

Engines (all index the same records of the same logs):
  wmreplay    `wmreplay search LOG QUESTION --limit 50` (BM25 over the words of the record's
              string values except type and session_id: speaker, dia_id, text)
  fts5        SQLite FTS5, tokenize='porter unicode61', columns speaker, dia_id, text;
              the question's words quoted and OR-ed; ORDER BY bm25()
  fts5-text   the same over speaker and text only (no dia_id)
  rank_bm25   rank_bm25.BM25Okapi over the lowercase words (runs of letters and digits)
              of speaker, dia_id and text; the question's words the same way

rank_bm25 is not in the standard library: without it, eval.py runs itself again with
target/recall-venv/bin/python when that exists (see README.md), and otherwise leaves the
engine out with a warning.
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV_PY = os.path.join(ROOT, "target", "recall-venv", "bin", "python")
KS = (5, 10, 25, 50)
TOP = 50
ALL_ENGINES = ["wmreplay", "fts5", "fts5-text", "rank_bm25"]
CATS = ["single-hop", "multi-hop", "temporal", "open-domain"]
WORD = re.compile(r"[^\W_]+")


def words(s):
    return WORD.findall(s.lower())


def distinct(xs):
    seen, out = set(), []
    for x in xs:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def load(data):
    convs = {}
    for fn in sorted(os.listdir(data)):
        if fn.startswith("conv-") and fn.endswith(".jsonl"):
            with open(os.path.join(data, fn), encoding="utf-8") as fh:
                convs[fn[:-6]] = [json.loads(line) for line in fh if line.strip()]
    with open(os.path.join(data, "questions.jsonl"), encoding="utf-8") as fh:
        qs = [json.loads(line) for line in fh if line.strip()]
    return convs, qs


# ---------------------------------------------------------------------------------- engines

class Wmreplay:
    name = "wmreplay"

    def __init__(self, binary, data, convs, jobs, extra=(), index_dir=None):
        self.bin = binary
        self.data = data
        self.jobs = jobs
        self.extra = list(extra)
        if index_dir:
            os.makedirs(index_dir, exist_ok=True)
            self.dir = index_dir
        else:
            self.tmp = tempfile.TemporaryDirectory(prefix="recall-idx-")
            self.dir = self.tmp.name
        for conv in convs:   # build each index once, before the parallel searches
            self._run(conv, "warm up")

    def _run(self, conv, q):
        log = os.path.join(self.data, conv + ".jsonl")
        idx = os.path.join(self.dir, conv + ".idx")
        p = subprocess.run([self.bin, "search", "--limit", str(TOP), "--index", idx, "--require-log", *self.extra, "--", log, q],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"wmreplay search failed ({p.returncode}) for {q!r}: {p.stderr.strip()}")
        return [h["record"].get("dia_id") for h in json.loads(p.stdout)["hits"]]

    def search_all(self, qs):
        with cf.ThreadPoolExecutor(self.jobs) as ex:
            return list(ex.map(lambda q: self._run(q["conv"], q["question"]), qs))


class Fts5:
    def __init__(self, convs, cols, name):
        self.name = name
        self.dbs = {}
        for conv, recs in convs.items():
            db = sqlite3.connect(":memory:")
            db.execute(f"CREATE VIRTUAL TABLE t USING fts5({', '.join(cols)}, tokenize='porter unicode61')")
            db.executemany(f"INSERT INTO t(rowid, {', '.join(cols)}) VALUES (?, {', '.join('?' for _ in cols)})",
                           [(i, *[r.get(c, "") for c in cols]) for i, r in enumerate(recs)])
            self.dbs[conv] = (db, recs)

    def search_all(self, qs):
        out = []
        for q in qs:
            db, recs = self.dbs[q["conv"]]
            terms = distinct(words(q["question"]))
            match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
            rows = db.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t), rowid LIMIT ?", (match, TOP)).fetchall()
            out.append([recs[i]["dia_id"] for (i,) in rows])
        return out


class RankBM25:
    name = "rank_bm25"

    def __init__(self, convs):
        import numpy as np
        from rank_bm25 import BM25Okapi
        self.np = np
        self.idx = {}
        for conv, recs in convs.items():
            corpus = [words(" ".join([r.get("speaker", ""), r.get("dia_id", ""), r.get("text", "")])) for r in recs]
            self.idx[conv] = (BM25Okapi(corpus), recs)

    def search_all(self, qs):
        np = self.np
        out = []
        for q in qs:
            bm, recs = self.idx[q["conv"]]
            scores = bm.get_scores(distinct(words(q["question"])))
            order = np.argsort(-scores, kind="stable")[:TOP]
            out.append([recs[i]["dia_id"] for i in order if scores[i] > 0])
        return out


# ---------------------------------------------------------------------------------- scoring

def score(qs, ranked):
    per = []
    for q, r in zip(qs, ranked):
        ev = set(q["evidence"])
        m = {f"R@{k}": len(ev & set(r[:k])) / len(ev) for k in KS}
        rr = 0.0
        for i, d in enumerate(r[:TOP]):
            if d in ev:
                rr = 1.0 / (i + 1)
                break
        m["MRR"] = rr
        per.append((q["category"], m))
    table = {}
    for cat in ["all"] + CATS:
        ms = [m for c, m in per if cat == "all" or c == cat]
        if ms:
            table[cat] = dict(n=len(ms), **{k: sum(m[k] for m in ms) / len(ms) for k in ms[0]})
    return table


def markdown(results, order):
    cols = [f"R@{k}" for k in KS] + ["MRR"]
    lines = ["| engine | category | questions | " + " | ".join(cols) + " | time (s) |",
             "|---|---|---:|" + "---:|" * len(cols) + "---:|"]
    for cat in ["all"] + CATS:
        for e in order:
            r = results[e]["table"].get(cat)
            if r:
                t = f"{results[e]['seconds']:.1f}" if cat == "all" else ""
                lines.append(f"| {e} | {cat} | {r['n']} | " + " | ".join(f"{r[c]:.3f}" for c in cols) + f" | {t} |")
    return "\n".join(lines)


def find_bin(arg):
    if arg:
        return arg
    for p in ("target/release/wmreplay", "target/debug/wmreplay"):
        full = os.path.join(ROOT, p)
        if os.path.exists(full):
            return full
    sys.exit("no wmreplay binary: build it (cargo build --release --bin wmreplay) or pass --bin PATH")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default=",".join(ALL_ENGINES), help=f"comma-separated, of {','.join(ALL_ENGINES)} (default: all)")
    ap.add_argument("--data", default=os.path.join(HERE, "data"), help="the directory gen.py wrote (default bench/recall/data)")
    ap.add_argument("--bin", default=None, help="the wmreplay binary (default target/release/wmreplay, else target/debug/wmreplay)")
    ap.add_argument("--jobs", type=int, default=2, help="wmreplay processes at once (default 2)")
    ap.add_argument("--json", action="store_true", help="print the results as one JSON object instead of a table")
    ap.add_argument("--search-args", default="", help="more arguments for `wmreplay search`, split on spaces, e.g. "
                    "'--embed-upstream http://127.0.0.1:8080 --embed-model all-MiniLM-L6-v2 --embed-weight 0.5' (hybrid)")
    ap.add_argument("--index-dir", default=None, help="keep wmreplay's indexes (and a hybrid search's vectors) in this "
                    "directory, to reuse them in the next run (default: a temporary directory)")
    a = ap.parse_args()
    engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    bad = [e for e in engines if e not in ALL_ENGINES]
    if bad:
        sys.exit(f"unknown engine(s) {bad}; known: {ALL_ENGINES}")

    if "rank_bm25" in engines:
        try:
            import rank_bm25  # noqa: F401
        except ImportError:
            venv = os.path.dirname(os.path.dirname(VENV_PY))
            if os.path.exists(VENV_PY) and os.path.realpath(sys.prefix) != os.path.realpath(venv) and not os.environ.get("RECALL_REEXEC"):
                os.environ["RECALL_REEXEC"] = "1"
                os.execv(VENV_PY, [VENV_PY] + sys.argv)
            print("warning: rank_bm25 is not installed, leaving it out (see bench/recall/README.md)", file=sys.stderr)
            engines.remove("rank_bm25")

    if not os.path.exists(os.path.join(a.data, "questions.jsonl")):
        sys.exit(f"no {a.data}/questions.jsonl: run python3 bench/recall/gen.py first")
    convs, qs = load(a.data)
    ids = {(c, r["dia_id"]) for c, recs in convs.items() for r in recs}
    missing = [(q["conv"], e) for q in qs for e in q["evidence"] if (q["conv"], e) not in ids]
    if missing:
        sys.exit(f"{len(missing)} evidence ids are not in the logs, e.g. {missing[:3]}")

    results = {}
    meta = dict(questions=len(qs), turns=sum(len(v) for v in convs.values()), conversations=len(convs))
    for e in engines:
        t0 = time.time()
        if e == "wmreplay":
            binary = find_bin(a.bin)
            meta["wmreplay_bin"] = binary
            meta["wmreplay_args"] = a.search_args
            eng = Wmreplay(binary, a.data, convs, a.jobs, a.search_args.split(), a.index_dir)
        elif e == "fts5":
            eng = Fts5(convs, ["speaker", "dia_id", "text"], "fts5")
        elif e == "fts5-text":
            eng = Fts5(convs, ["speaker", "text"], "fts5-text")
        else:
            eng = RankBM25(convs)
        ranked = eng.search_all(qs)
        results[e] = dict(table=score(qs, ranked), seconds=time.time() - t0)
        print(f"{e}: {results[e]['seconds']:.1f} s", file=sys.stderr)
    meta["sqlite"] = sqlite3.sqlite_version
    if a.json:
        print(json.dumps(dict(meta=meta, results=results), indent=1))
    else:
        print(f"{meta['conversations']} conversations, {meta['turns']} turns, {meta['questions']} questions"
              + (f"; wmreplay = {meta['wmreplay_bin']}" if "wmreplay_bin" in meta else "") + f"; SQLite {meta['sqlite']}\n")
        print(markdown(results, engines))


if __name__ == "__main__":
    main()
