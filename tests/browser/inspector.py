#!/usr/bin/env python3
"""The memory inspector (`serve`'s /ui) in a real browser.

Headless Chromium (Debian's, driven by Playwright for Python) opens the
page against a `wmreplay serve` of a generated log with planted records
and checks each view: the timeline renders and pages as it scrolls (no
request asks for more than 200 records), a search shows the planted
record with its words marked, a turn's view shows the records and token
counts `wmreplay respond` and `wmreplay stats` give for the log before
that turn, the live tail shows an appended record within a second, the
memory view shows facts with their versions, files and summaries, the logs
view lists skipped lines and shows one that is not UTF-8. Red team: records
whose text is HTML or script render as text (nothing runs, no element is
made of them), a 10 MB record, a 200 KB line without spaces. The page asks
no host but the server, and with a token asks for it once and never puts
it in a URL. Screenshots of every view go to target/inspector-screenshots/.

    python3 tests/browser/inspector.py   # WMREPLAY_BIN, CHROMIUM, SCREENSHOTS may be set

Prints "N passed, N failed" and exits non-zero on any failure.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from playwright.sync_api import sync_playwright

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("WMREPLAY_BIN") or os.path.join(ROOT, "target", "debug", "wmreplay")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = os.environ.get("SCREENSHOTS") or os.path.join(ROOT, "target", "inspector-screenshots")
XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b>bold?</b>'
WINDOW = "3000"

results = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    if ok:
        results["passed"] += 1
        print(f"ok   {name}")
    else:
        results["failed"] += 1
        print(f"FAIL {name} {detail}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_log(path):
    """A generated log and the planted records; returns what was planted."""
    subprocess.run([BIN, "gen", "--size", "3MiB", "--seed", "7", path], check=True)
    planted = {}
    with open(path, "ab") as f:
        def put(rec):
            f.flush()
            at = f.tell()
            f.write(json.dumps(rec).encode() + b"\n")
            return at

        base = 1_900_000_000_000
        planted["big"] = put({"type": "tool_result", "ts_ms": base, "text": "x" * (10 << 20)})
        planted["long"] = put({"type": "wm_event", "ts_ms": base + 1, "text": "y" * (200 << 10)})
        f.write(b'{"type":"text_input","ts_ms":5,"text":"\xff\xfe broken"}\n')
        put({"type": "wm_fact", "ts_ms": base + 2, "key": "user.name", "value": "Ada"})
        put({"type": "wm_fact", "ts_ms": base + 3, "key": "user.name", "value": "Ada Lovelace"})
        put({"type": "wm_fact", "ts_ms": base + 4, "key": "/memories/notes.md", "value": "# Notes\n- likes tea"})
        planted["xss"] = put({"type": "wm_insight", "ts_ms": base + 5, "text": XSS})
        # Ordinary turns after the large records: the window holds these.
        for i in range(30):
            put({"type": "text_input" if i % 2 == 0 else "text_output", "ts_ms": base + 10 + i,
                 "session_id": "s-9", "text": f"turn {i}: the rollout plan, step {i} of thirty"})
        planted["input"] = put({"type": "text_input", "ts_ms": base + 60, "session_id": "s-9",
                                "text": "What did we decide about the quokkaharbour rollout? " + XSS})
        planted["output"] = put({"type": "text_output", "ts_ms": base + 61, "session_id": "s-9",
                                 "text": "We decided to ship quokkaharbour on Tuesday."})
    return planted


def start_serve(log, port, *extra):
    p = subprocess.Popen(
        [BIN, "serve", "--log", log, "--addr", f"127.0.0.1:{port}", "--max-tokens-window", WINDOW, "--facts", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    return wait_ready(port, p)


def wait_ready(port, p):
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200:
                    return p
        except Exception:
            time.sleep(0.05)
    p.kill()
    raise SystemExit(f"serve did not start: {p.stderr.read().decode()}")


def cli_json(*args):
    out = subprocess.run([BIN, *args], check=True, capture_output=True)
    return json.loads(out.stdout)


def main():
    if not CHROMIUM:
        raise SystemExit("no chromium: apt-get install chromium")
    os.makedirs(SHOTS, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="wmreplay-inspector-")
    log = os.path.join(tmp, "wm.log")
    planted = make_log(log)
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    server = start_serve(log, port)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            run_views(browser, origin, log, planted)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    # Many small records: every row reachable, filters that scan, a turn of
    # 300,000 messages, a late record.
    many = os.path.join(tmp, "many.log")
    with open(many, "w") as f:
        for i in range(300_000):
            f.write('{"type":"e","ts_ms":%d,"n":%d}\n' % (1000 + i, i))
        for i in range(5):
            f.write(json.dumps({"type": "text_input", "ts_ms": 400_000 + i, "text": f"needle {i}"}) + "\n")
    port = free_port()
    server = subprocess.Popen([BIN, "serve", "--log", many, "--addr", f"127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(port, server)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            run_many(browser, f"http://127.0.0.1:{port}", many)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    # With a token: asked for once, sent as a header, never in a URL.
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    env_token = "inspector-s3cret"
    os.environ["WMREPLAY_TEST_TOKEN"] = env_token
    server = start_serve(log, port, "--auth-token-env", "WMREPLAY_TEST_TOKEN")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            run_token(browser, origin, env_token)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{results['passed']} passed, {results['failed']} failed (screenshots in {SHOTS})")
    sys.exit(1 if results["failed"] else 0)


def watch(page, origin):
    """Every request the page makes, and anything that ran or failed."""
    seen = {"urls": [], "errors": [], "dialogs": []}
    page.on("request", lambda r: seen["urls"].append(r.url))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    return seen


def run_views(browser, origin, log, planted):
    page = browser.new_page(viewport={"width": 1400, "height": 860})
    seen = watch(page, origin)

    # Timeline: first paint, then scrolling pages through the log.
    t0 = time.monotonic()
    page.goto(f"{origin}/ui")
    page.wait_for_selector("#tl-rows .row:not(.pending)")
    first_paint = time.monotonic() - t0
    print(f"     timeline's first paint: {first_paint * 1000:.0f} ms")
    rows = page.locator("#tl-rows .row:not(.pending)").count()
    check("the timeline renders rows", rows > 10, f"{rows} rows")
    page.screenshot(path=os.path.join(SHOTS, "timeline.png"))
    for frac in (0.0, 0.25, 0.5):
        page.eval_on_selector("#tl-scroller", f"(e) => {{ e.scrollTop = e.scrollHeight * {frac}; }}")
        page.wait_for_timeout(300)
    page.wait_for_selector("#tl-rows .row:not(.pending)")
    asks = [u for u in seen["urls"] if "/timeline?" in u]
    limits = [int(u.split("limit=")[1].split("&")[0]) for u in asks if "limit=" in u]
    check("scrolling fetches at most 200 records a time", limits and max(limits) <= 200, str(limits))
    check("scrolling fetched more pages", len(asks) >= 3, str(len(asks)))

    # The planted records, by a time filter: the HTML is text (no element
    # made of it, nothing ran), the large ones one row each.
    page.fill("#tl-since", "1900000000000")
    page.click("#tl-filters button[type=submit]")
    page.wait_for_selector("#tl-rows >> text=xxxxxxxx")
    text = page.inner_text("#tl-rows")
    check("a record's HTML shows as text in the timeline", "<img src=x" in text, text[-500:])
    check("the 200 KB line renders as one row", "yyyyyyyy" in text)
    check("the 10 MB record renders as one row", "xxxxxxxx" in text)
    sessions = page.eval_on_selector_all("#tl-rows .row .sess", "(s) => s.map((e) => e.textContent)")
    check("a row shows its session", "s-9" in sessions, str(sessions[-5:]))
    bad = page.evaluate("() => document.querySelectorAll('main img, main script, main b').length")
    check("no element is made of a record", bad == 0, str(bad))
    # Its detail: the 10 MB record shows its first MiB.
    page.click(f"#tl-rows .row[data-k] >> text=xxxxxxxx")
    page.wait_for_function("() => document.querySelector('#tl-detail pre') && document.querySelector('#tl-detail pre').textContent.length > 1000")
    detail = page.evaluate("() => document.querySelector('#tl-detail pre').textContent")
    check("a 10 MB record's detail shows its first MiB", "first MiB" in detail and len(detail) < 1_100_000, str(len(detail)))
    page.screenshot(path=os.path.join(SHOTS, "timeline-filtered.png"))
    page.click("#tl-clear")
    page.wait_for_timeout(300)

    # Live tail: an appended record shows within a second.
    with open(log, "ab") as f:
        f.write(json.dumps({"type": "wm_event", "ts_ms": 1_900_000_001_000, "text": "tail-marker-31337"}).encode() + b"\n")
    t0 = time.monotonic()
    try:
        page.wait_for_selector("#tl-rows >> text=tail-marker-31337", timeout=1000)
        shown = time.monotonic() - t0
    except Exception:
        shown = None
    check("the live tail shows an appended record within a second", shown is not None and shown <= 1.0, str(shown))
    if shown is not None:
        print(f"     appended record shown after {shown * 1000:.0f} ms")

    # Search: the planted record, its words marked, its neighbours around.
    page.keyboard.press("5")
    page.fill("#search-q", "quokkaharbour rollout")
    page.press("#search-q", "Enter")
    page.wait_for_selector("#search-hits .ctx li.hit")
    hit = page.inner_text("#search-hits > li:first-child .ctx li.hit")
    marks = page.eval_on_selector_all("#search-hits > li:first-child .ctx li.hit mark", "(ms) => ms.map((m) => m.textContent.toLowerCase())")
    check("a search shows the planted record", "quokkaharbour" in hit.lower(), hit)
    check("the searched words are marked", "quokkaharbour" in marks, str(marks))
    ctx = page.locator("#search-hits > li:first-child .ctx li").count()
    check("a hit shows the turns around it", ctx >= 2, str(ctx))
    page.screenshot(path=os.path.join(SHOTS, "search.png"))

    # A turn as the model saw it, against wmreplay respond and stats.
    page.goto(f"{origin}/ui#turn?offset={planted['input']}")
    page.wait_for_selector("#turn-parts li")
    page.click("#turn-body details summary")
    page.wait_for_function("() => document.getElementById('turn-raw').textContent.length > 0")
    raw = page.evaluate("() => document.getElementById('turn-raw').textContent")
    request = json.loads(raw)
    with open(log, "rb") as f:
        prefix_bytes = f.read(planted["input"])
    prefix = log + ".prefix"
    with open(prefix, "wb") as f:
        f.write(prefix_bytes)
    text = "What did we decide about the quokkaharbour rollout? " + XSS
    want = cli_json("respond", prefix, "--text", text, "--session", "s-9", "--cache", "auto",
                    "--max-tokens", WINDOW, "--facts")
    check("the turn's request is wmreplay respond's for the log before it", request == want)
    stats = cli_json("stats", prefix, "--max-tokens", WINDOW, "--facts")
    parts = page.eval_on_selector_all(
        "#turn-parts li", "(ls) => ls.map((l) => [l.querySelector('.kind').textContent, l.querySelector('.tok').textContent])")
    history = [p for p in parts if p[0].rstrip(" ⚑") not in ("system", "CURRENT_USER_REQUEST", "wm_facts")]
    tokens = sum(int(t.replace(",", "")) for _, t in history)
    check("the turn shows respond's records", len(history) == stats["selected_records"], f"{len(history)} vs {stats['selected_records']}")
    check("the turn's token counts add up to the window's", tokens == stats["window_tokens"], f"{tokens} vs {stats['window_tokens']}")
    why = page.inner_text("#turn-why")
    start = stats["window_start"]
    check("the turn says why the window starts where it does",
          start is not None and f"{start['offset']:,}" in why and WINDOW in why.replace(",", ""), why)
    answer = page.inner_text("#turn-answer")
    check("the turn shows the answer that came back", "ship quokkaharbour on Tuesday" in answer, answer)
    point = page.inner_text("#turn-point")
    check("the turn's HTML text shows as text", "<script>" in point, point)
    page.click("#turn-parts li:nth-child(2)")
    page.screenshot(path=os.path.join(SHOTS, "turn.png"))

    # Memory: facts with versions, files, summaries.
    page.keyboard.press("4")
    page.wait_for_selector("#mem-facts .card")
    facts = page.inner_text("#mem-facts")
    check("memory shows a fact's latest value", "Ada Lovelace" in facts, facts[:300])
    page.click("#mem-facts .card:has-text('user.name') summary")
    versions = page.inner_text("#mem-facts .card:has-text('user.name') ol")
    check("memory shows a fact's versions", "Ada Lovelace" in versions and "Ada\n" in versions + "\n", versions)
    files = page.inner_text("#mem-files")
    check("memory shows the memory files", "/memories/notes.md" in files and "likes tea" in files, files)
    page.screenshot(path=os.path.join(SHOTS, "memory.png"))

    # Logs: skipped lines, one not UTF-8 shown as written.
    page.keyboard.press("1")
    page.wait_for_selector("#skips-table tbody tr")
    page.wait_for_function("() => document.querySelector('#logs-table tbody td:nth-child(3)').textContent !== '…'")
    logs = page.inner_text("#logs-table")
    check("the logs view lists the log with its records", "wm.log" in logs or "(the log)" in logs, logs)
    row = page.locator("#skips-table tbody tr", has_text="invalid UTF-8")
    if row.count() == 0:
        row = page.locator("#skips-table tbody tr").last
    row.locator("button").first.click()
    page.wait_for_selector("#skip-line:not([hidden])")
    line = page.inner_text("#skip-line")
    check("a skipped line that is not UTF-8 is shown", "broken" in line and "not valid UTF-8" in line, line[:200])
    page.screenshot(path=os.path.join(SHOTS, "logs.png"))

    # Keyboard: the tabs move with the arrow keys, and every control has a name.
    page.focus("#tab-logs")
    page.keyboard.press("ArrowRight")
    check("arrow keys move between views", page.evaluate("() => document.activeElement.id") == "tab-timeline")
    unnamed = page.evaluate("""() => [...document.querySelectorAll('button, input, select, [role=listbox]')]
        .filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim() || (e.labels && e.labels.length)))
        .map((e) => e.outerHTML.slice(0, 80))""")
    check("every control has an accessible name", not unnamed, str(unnamed))

    others = [u for u in seen["urls"] if not u.startswith(origin)]
    check("the page asks no host but the server", not others, str(others[:5]))
    check("nothing from the log ran", page.evaluate("() => window.__pwned") is None and not seen["dialogs"], str(seen["dialogs"]))
    check("the page raised no error", not seen["errors"], str(seen["errors"][:3]))
    # Dark theme follows the system.
    page.emulate_media(color_scheme="dark")
    page.keyboard.press("2")
    page.wait_for_timeout(300)
    bg = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    check("the dark theme follows the system", bg != "rgb(251, 251, 250)", bg)
    page.screenshot(path=os.path.join(SHOTS, "timeline-dark.png"))
    page.close()


def run_many(browser, origin, log):
    page = browser.new_page(viewport={"width": 1400, "height": 860})
    seen = watch(page, origin)
    page.goto(f"{origin}/ui")
    page.wait_for_selector("#tl-rows .row:not(.pending)")
    page.wait_for_selector("#tl-rows >> text=needle 4", timeout=5000)
    check("the newest record of 300,005 is on screen at the start", True)
    page.focus("#tl-scroller")
    page.keyboard.press("Home")
    page.wait_for_selector("#tl-rows .row[data-k='0']:not(.pending)")
    page.keyboard.press("End")
    page.wait_for_selector("#tl-rows >> text=needle 4", timeout=5000)
    sel = page.evaluate("() => document.querySelector('#tl-rows .row[aria-selected=true]') && document.querySelector('#tl-rows .row[aria-selected=true]').textContent")
    check("End selects and shows the last row", sel is not None and "needle 4" in sel, str(sel))
    # A late record lands first: the rows on screen are read again.
    page.keyboard.press("Home")
    page.wait_for_selector("#tl-rows .row[data-k='0']:not(.pending)")
    with open(log, "a") as f:
        f.write(json.dumps({"type": "late", "ts_ms": 1, "text": "late-arrival"}) + "\n")
    try:
        page.wait_for_selector("#tl-rows .row[data-k='0'] >> text=late-arrival", timeout=2000)
        late = True
    except Exception:
        late = False
    check("a late record shows in its place on screen", late)
    # A kind found only past the first scan's 20,000 rows.
    page.select_option("#tl-kinds", "text_input")
    page.click("#tl-filters button[type=submit]")
    try:
        page.wait_for_selector("#tl-rows >> text=needle 0", timeout=10000)
        found = page.locator("#tl-rows .row:not(.pending)").count()
    except Exception:
        found = 0
    check("a kind filter scans on until it finds its records", found == 5, str(found))
    # A turn of 300,005 messages: listed in part, no error.
    page.keyboard.press("Escape")
    page.focus("#tl-scroller")
    page.keyboard.press("End")
    page.keyboard.press("t")
    page.wait_for_selector("#turn-parts li.cut", timeout=60000)
    shown = page.locator("#turn-parts li").count()
    check("a turn of 300,000 messages lists the first and last 500", shown == 1001, str(shown))
    total = page.inner_text("#turn-total")
    check("its token count says where it is estimated", "about" in total, total)
    page.screenshot(path=os.path.join(SHOTS, "turn-many.png"))
    check("the page raised no error with 300,000 records", not seen["errors"], str(seen["errors"][:3]))
    page.close()


def run_token(browser, origin, token):
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    seen = watch(page, origin)
    page.goto(f"{origin}/ui")
    page.wait_for_selector("#token-dialog[open]")
    page.fill("#token-input", token)
    page.press("#token-input", "Enter")
    page.wait_for_selector("#tl-rows .row:not(.pending)")
    check("with a token the page asks for it and then shows the log", True)
    check("the token is never in a URL", not any(token in u for u in seen["urls"]))
    page.close()


if __name__ == "__main__":
    main()
