#!/usr/bin/env python3
"""Runs the code blocks of README.md and docs/*.md that need a built package.

Such a block is marked `<!-- doc-test: skip (… run by .ci/python-package.sh …) -->`
(or `.ci/node-package.sh`): the docs' own test (tests/service/doc_blocks.rs) skips
it, as the package is not installed there, and the package script runs it here,
with the package it has just installed.

    doc-package-blocks.py python|js INTERPRETER WORKDIR

Each block runs as written, in WORKDIR (for JavaScript, a directory whose
node_modules holds the installed package), beside copies of the example log
as wm.log, working_memory.log and examples/working_memory.log. A URL of the
providers' APIs in a block is pointed at a local server that answers every
POST with an empty JSON object (the blocks send a request; what comes back is
not theirs to check). Exits 1 naming the file and line of each block that fails.
"""
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {"python": ".ci/python-package.sh", "js": ".ci/node-package.sh"}
LANGS = {"python": ("python",), "js": ("js", "javascript", "mjs")}
MARKER = re.compile(r"<!-- doc-test: skip \((.*)\) -->")


def blocks(lang):
    """(file, line, code) of the blocks the package script runs."""
    files = [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")
    )
    out = []
    for path in files:
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            fence = lines[i].strip()
            if fence.startswith("```") and fence[3:].strip() in LANGS[lang]:
                start = i
                i += 1
                body = []
                while i < len(lines) and lines[i].strip() != "```":
                    body.append(lines[i])
                    i += 1
                marker = MARKER.search(lines[start - 1]) if start > 0 else None
                if marker and SCRIPTS[lang] in marker.group(1):
                    out.append((os.path.relpath(path, ROOT), start + 1, "\n".join(body) + "\n"))
            i += 1
    return out


class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b"{}"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in SCRIPTS:
        sys.exit(__doc__)
    lang, interpreter, work = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
    found = blocks(lang)
    if not found:
        sys.exit(f"no block is marked as run by {SCRIPTS[lang]}")
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    local = f"http://127.0.0.1:{sink.server_address[1]}"
    example = os.path.join(ROOT, "examples", "working_memory.log")
    failed = []
    for n, (path, line, code) in enumerate(found):
        for name in ("wm.log", "working_memory.log", os.path.join("examples", "working_memory.log")):
            os.makedirs(os.path.dirname(os.path.join(work, name)), exist_ok=True)
            shutil.copy(example, os.path.join(work, name))
        code = re.sub(r"https://api\.(anthropic|openai)\.com", local, code)
        if lang == "python":
            script = os.path.join(work, f"doc_block_{n}.py")
        else:
            esm = re.search(r"^(import|export) ", code, re.M) or re.search(r"^await ", code, re.M)
            script = os.path.join(work, f"doc_block_{n}.{'mjs' if esm else 'cjs'}")
        with open(script, "w", encoding="utf-8") as f:
            f.write(code)
        env = dict(os.environ, ANTHROPIC_API_KEY="sk-ant-doc-test", OPENAI_API_KEY="sk-doc-test")
        r = subprocess.run([interpreter, script], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        status = "ok" if r.returncode == 0 else f"FAILED (exit {r.returncode})"
        print(f"{path}:{line}: {status}")
        if r.returncode != 0:
            failed.append(f"{path}:{line}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    sink.shutdown()
    if failed:
        sys.exit("these examples fail as written:\n\n" + "\n\n".join(failed))
    print(f"{len(found)} {lang} examples of the docs ran with the installed package")


if __name__ == "__main__":
    main()
