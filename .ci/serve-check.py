"""One short session with `wmreplay serve`, for .ci/platforms.sh: start the
server (COMMAND... serve --log LOG --addr 127.0.0.1:PORT), wait for /healthz,
append records through POST /v1/records, then print what the server answers
to POST /v1/search, /v1/context and /v1/stats, and the log's bytes; then stop
it with SIGINT, which must end it with status 0. Run with each
platform's binary, the printouts must be equal.

    python3 .ci/serve-check.py PORT LOG COMMAND...
"""

import json
import signal
import subprocess
import sys
import time
import urllib.request


def call(port, path, body=None):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


def main():
    port, log, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    server = subprocess.Popen(
        command + ["serve", "--log", log, "--addr", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                call(port, "/healthz")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    sys.exit(f"serve-check: the server did not start:\n{server.stderr.read().decode()}")
                time.sleep(0.2)
        out = []
        for i in range(3):
            rec = {"type": "event", "ts_ms": 1900000000000 + i, "text": f"lisbon invoice number {i}"}
            out.append(call(port, "/v1/records", rec))
        out.append(call(port, "/v1/records", [
            {"type": "insight", "ts_ms": 1800000000000, "text": "a late insight about the invoice"},
            {"type": "event", "ts_ms": 1900000000009, "text": "batch, second"},
        ]))
        out.append(call(port, "/v1/search", {"query": "invoice lisbon", "limit": 3}))
        out.append(call(port, "/v1/context", {"text": "what about the invoice?", "tail": 6}))
        out.append(call(port, "/v1/stats"))
        with open(log, encoding="utf-8") as f:
            out.append(f.read())
        # Ctrl-C (under Wine, SIGINT becomes the console's CTRL_C_EVENT):
        # a graceful stop, status 0.
        server.send_signal(signal.SIGINT)
        try:
            code = server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            sys.exit("serve-check: the server did not stop within 30 s of SIGINT")
        stderr = server.stderr.read().decode()
        if code != 0 or "stopped" not in stderr:
            sys.exit(f"serve-check: the server's stop: status {code}\n{stderr}")
        out.append("stopped on SIGINT, status 0")
        print("\n".join(out))
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


main()
