#!/usr/bin/env python3
"""A real browser against `wmreplay serve`: no web page writes the log.

Headless Chromium opens pages of another origin that try, every way a page
can without the server's consent, to write into the log or to make the
server call its model: `fetch` in `no-cors` mode (a text/plain body), a
form posting JSON-looking text/plain and url-encoded bodies, `sendBeacon`,
and a CORS `fetch` with a JSON body (which asks the server first). A page
whose own name resolves to this machine (DNS rebinding, simulated with
Chromium's host resolver rules) tries to read the facts. Afterwards the log
must be as it was and the model never called; a control run from a client
that is not a browser must write.

    python3 tests/browser/cross_site.py     # WMREPLAY_BIN, CHROMIUM may name the binaries

Prints "N passed, N failed" and exits non-zero on any failure.
"""

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("WMREPLAY_BIN") or os.path.join(ROOT, "target", "debug", "wmreplay")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Upstream(http.server.BaseHTTPRequestHandler):
    """A model API that counts the calls it gets (none are expected)."""

    calls = 0

    def do_POST(self):
        Upstream.calls += 1
        self.send_response(500)
        self.end_headers()

    def log_message(self, *args):
        pass


class Pages(http.server.BaseHTTPRequestHandler):
    """The attacker's site: serves the page it is asked for."""

    page = ""

    def do_GET(self):
        body = Pages.page.encode()
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve_in_thread(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def attack_page(target):
    """Every way a page writes to another origin without its consent."""
    record = json.dumps({"type": "wm_insight", "insight": "written by a web page"})
    anthropic = json.dumps(
        {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "page"}]}
    )
    openai = json.dumps({"model": "m", "messages": [{"role": "user", "content": "page"}]})
    respond = json.dumps({"text": "written by a web page"})
    # A text/plain form whose one field reads as JSON: name + "=" + value.
    form_name = '{"type":"wm_insight","insight":"form","pad":"'
    form_value = '"}'
    return f"""<!doctype html><html><body><pre id="out">running</pre>
<iframe name="sink" style="display:none"></iframe>
<form id="plain" method="POST" action="{target}/v1/records" enctype="text/plain" target="sink">
<input type="hidden" name='{form_name}' value='{form_value}'></form>
<form id="urlenc" method="POST" action="{target}/v1/facts/k" target="sink">
<input type="hidden" name="v" value="page"></form>
<script>
const out = [];
const T = {json.dumps(target)};
async function go() {{
  const sends = [
    ["/v1/records", {json.dumps(record)}],
    ["/respond", {json.dumps(respond)}],
    ["/anthropic/v1/messages", {json.dumps(anthropic)}],
    ["/openai/v1/chat/completions", {json.dumps(openai)}],
  ];
  for (const [path, body] of sends) {{
    try {{
      await fetch(T + path, {{method: "POST", mode: "no-cors", body}});
      out.push("no-cors " + path + " sent");
    }} catch (e) {{ out.push("no-cors " + path + " error " + e); }}
    try {{
      const r = await fetch(T + path, {{method: "POST", headers: {{"content-type": "application/json"}}, body}});
      out.push("cors " + path + " status " + r.status);
    }} catch (e) {{ out.push("cors " + path + " blocked"); }}
    out.push("beacon " + path + " " + navigator.sendBeacon(T + path, body));
  }}
  document.getElementById("plain").submit();
  await new Promise(r => setTimeout(r, 300));
  document.getElementById("urlenc").submit();
  await new Promise(r => setTimeout(r, 300));
  out.push("forms submitted");
  document.getElementById("out").textContent = "done\\n" + out.join("\\n");
}}
go();
</script></body></html>"""


def chromium(url, *extra):
    cmd = [
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--virtual-time-budget=8000",
        f"--user-data-dir={tempfile.mkdtemp(prefix='wmreplay-chromium-')}",
        *extra,
        "--dump-dom",
        url,
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return r.stdout


def main():
    if not CHROMIUM:
        print("chromium not found (apt-get install chromium, or set CHROMIUM)", file=sys.stderr)
        return 2
    passed = failed = 0

    def check(ok, what, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok: {what}")
        else:
            failed += 1
            print(f"FAILED: {what} {detail}")

    work = tempfile.mkdtemp(prefix="wmreplay-browser-")
    log = os.path.join(work, "wm.log")
    shutil.copy(os.path.join(ROOT, "examples", "working_memory.log"), log)
    upstream = serve_in_thread(Upstream)
    pages = serve_in_thread(Pages)
    port = free_port()
    env = dict(os.environ, UPSTREAM_KEY="sk-never-spent")
    server = subprocess.Popen(
        [
            BIN, "serve", "--log", log, "--addr", f"127.0.0.1:{port}",
            "--upstream", f"http://127.0.0.1:{upstream.server_address[1]}",
            "--model", "m", "--api-key-env", "UPSTREAM_KEY", "--no-fsync",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        before = open(log, "rb").read()
        pages_port = pages.server_address[1]
        # The same site (another port of 127.0.0.1), then another site.
        for target in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
            Pages.page = attack_page(target)
            dom = chromium(f"http://127.0.0.1:{pages_port}/")
            check("done" in dom, f"the page against {target} ran", dom[-2000:])
            check("no-cors /v1/records sent" in dom, f"the page against {target} sent its requests", dom[-2000:])
            check(open(log, "rb").read() == before, f"a page against {target} wrote nothing",
                  open(log, "rb").read()[len(before):][:500])
        check(Upstream.calls == 0, "no page made the server call its model", Upstream.calls)
        # DNS rebinding: a name of the attacker's that resolves to this
        # machine. The page cannot read what the server holds.
        dom = chromium(
            f"http://rebound.example:{port}/v1/facts",
            "--host-resolver-rules=MAP rebound.example 127.0.0.1",
        )
        check("host_not_allowed" in dom and '"facts"' not in dom,
              "a rebound name reads nothing", dom[-1000:])
        # The control: a client that is not a page writes.
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/records",
            data=json.dumps({"type": "wm_insight", "insight": "from a client"}).encode(),
            headers={"content-type": "application/json"},
        )
        status = urllib.request.urlopen(req, timeout=10).status
        check(status == 200 and len(open(log, "rb").read()) > len(before),
              "a client that is not a page still writes", status)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        upstream.shutdown()
        pages.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
