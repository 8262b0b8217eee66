"""Search (``wmreplay.search``, ``SearchIndex``) against the CLI's
``wmreplay search``."""

import asyncio
import json
import os
import subprocess
import threading

import pytest

import wmreplay
from test_wmreplay import EXAMPLE, cli

LINES = [
    {"type": "text_input", "ts_ms": 100, "session_id": "s-1", "text": "Pay the Lisbon invoice on Friday"},
    {"type": "wm_event", "ts_ms": 200, "session_id": "s-2", "event": "calendar synced"},
    {"type": "text_output", "ts_ms": 300, "text": "The invoice for Lisbon is paid", "n": {"deep": ["lisbon"]}},
    {"type": "wm_insight", "ts_ms": 400, "session_id": "s-2", "text": "Invoices pile up; one invoice is late"},
]
LOG = "".join(json.dumps(l, separators=(",", ":")) + "\n" for l in LINES) + "not json, an invoice\n"


def offset_of(i):
    """The byte offset of line `i` of LOG."""
    return sum(len(json.dumps(l, separators=(",", ":")).encode()) + 1 for l in LINES[:i])


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "wm.log"
    p.write_text(LOG)
    return p


def cli_hits(path, query, *args):
    """What `wmreplay search` prints for the same search."""
    out = subprocess.run([cli(), "search", str(path), query, "--format", "ndjson", *args],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l]


def test_search_finds_a_planted_record_with_its_fields(log):
    hits = wmreplay.search(log, "Friday")
    assert len(hits) == 1
    hit = hits[0]
    assert list(hit) == ["offset", "ts_ms", "type", "score", "record"]
    assert hit["offset"] == 0
    assert hit["ts_ms"] == 100
    assert hit["type"] == "text_input"
    assert isinstance(hit["score"], float) and hit["score"] > 0
    assert hit["record"] == LINES[0]
    # The index is made next to the log.
    assert os.path.exists(f"{log}.wmreplay.idx")
    # A word anywhere in a record's string values, nested ones too; case ignored.
    both = wmreplay.search(str(log), "LISBON")
    assert sorted(h["offset"] for h in both) == [0, offset_of(2)]
    assert both[0]["score"] >= both[1]["score"]


@pytest.mark.parametrize("query, options, args", [
    ("invoice", {}, []),
    ("invoice", {"limit": 2}, ["--limit", "2"]),
    ("invoice lisbon", {"kinds": ["text_output", "wm_insight"]}, ["--kinds", "text_output,wm_insight"]),
    ("invoice", {"session": "s-2"}, ["--session", "s-2"]),
    ("invoice", {"since": 200, "until": 300.5}, ["--since", "200", "--until", "300.5"]),
    ("synced calendar", {}, []),
])
def test_search_gives_the_cli_hits(log, query, options, args):
    assert wmreplay.search(log, query, **options) == cli_hits(log, query, *args)


def test_search_of_the_example_log_is_the_cli(tmp_path):
    p = tmp_path / "example.log"
    p.write_bytes(EXAMPLE.read_bytes())
    for query in ["scene", "user request", "the"]:
        assert wmreplay.search(p, query, limit=1000) == cli_hits(p, query, "--limit", "1000")


def test_options_limit_kinds_session_since_until(log):
    assert len(wmreplay.search(log, "invoice")) == 3
    assert len(wmreplay.search(log, "invoice", limit=1)) == 1
    assert [h["type"] for h in wmreplay.search(log, "invoice", kinds=["wm_insight"])] == ["wm_insight"]
    assert sorted(h["ts_ms"] for h in wmreplay.search(log, "invoice", since=300)) == [300, 400]
    assert [h["ts_ms"] for h in wmreplay.search(log, "invoice", until=100)] == [100]
    # A session keeps its records and those without one.
    assert sorted(h["ts_ms"] for h in wmreplay.search(log, "invoice", session="s-1")) == [100, 300]
    # None is "not given".
    assert len(wmreplay.search(log, "invoice", limit=None, kinds=None, since=None)) == 3


def test_index_path_puts_the_index_elsewhere(log, tmp_path):
    idx = tmp_path / "elsewhere.idx"
    assert len(wmreplay.search(log, "friday", index_path=idx)) == 1
    assert idx.exists()
    assert not os.path.exists(f"{log}.wmreplay.idx")
    index = wmreplay.SearchIndex(log, index_path=idx)
    assert os.fspath(index.index_path) == str(idx)
    assert os.fspath(index.path) == str(log)
    assert os.fspath(wmreplay.SearchIndex(log).index_path) == f"{log}.wmreplay.idx"


def test_a_search_index_finds_a_line_appended_since_its_last_search(log):
    index = wmreplay.SearchIndex(log)
    assert index.search("zanzibar") == []
    line = {"type": "text_input", "ts_ms": 500, "text": "Book the Zanzibar ferry"}
    with open(log, "a") as f:
        f.write(json.dumps(line) + "\n")
    hits = index.search("zanzibar ferry")
    assert len(hits) == 1
    assert hits[0]["offset"] == len(LOG.encode())
    assert hits[0]["record"] == line
    # refresh() says what it read: nothing now; the next line after an append.
    assert index.refresh() == {"rebuilt": False, "bytes": 0, "records": 0}
    more = json.dumps({"type": "wm_event", "ts_ms": 600, "e": "ferry booked"}) + "\n"
    with open(log, "a") as f:
        f.write(more)
    assert index.refresh() == {"rebuilt": False, "bytes": len(more), "records": 1}
    assert len(index.search("ferry")) == 2
    # A log rewritten under it is indexed again from the start.
    log.write_text(json.dumps(line) + "\n")
    r = index.refresh()
    assert r["rebuilt"] is True and r["records"] == 1
    assert [h["offset"] for h in index.search("ferry")] == [0]


def test_one_index_shared_between_threads(log):
    index = wmreplay.SearchIndex(log)
    counts, errors = [], []

    def work():
        try:
            for _ in range(20):
                counts.append(len(index.search("invoice")))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert counts == [3] * 80


def test_async_twins(log):
    async def main():
        index = wmreplay.SearchIndex(log)
        return (await wmreplay.asearch(log, "friday", limit=1), await index.asearch("invoice", kinds=["wm_insight"]),
                await index.arefresh())

    one, kinds, refreshed = asyncio.run(main())
    assert [h["offset"] for h in one] == [0]
    assert [h["type"] for h in kinds] == ["wm_insight"]
    assert refreshed == {"rebuilt": False, "bytes": 0, "records": 0}


@pytest.mark.parametrize("query, options, message", [
    ("?!", {}, r"^the query has no word to search for"),
    ("x" * 4097, {}, r"^the query is 4097 bytes long; at most 4096 are searched$"),
    (" ".join(f"w{i}" for i in range(65)), {}, r"at most 64 are searched$"),
    ("invoice", {"limit": 0}, r"^limit must be 1 to 1000, not 0$"),
    ("invoice", {"limit": 1001}, r"^limit must be 1 to 1000, not 1001$"),
    ("invoice", {"limit": -3}, r"whole number from 1 to 1000, not -3$"),
])
def test_a_bad_query_or_limit_raises_value_error_before_anything_is_made(log, query, options, message):
    with pytest.raises(ValueError, match=message):
        wmreplay.search(log, query, **options)
    with pytest.raises(ValueError, match=message):
        wmreplay.SearchIndex(log).search(query, **options)
    assert not os.path.exists(f"{log}.wmreplay.idx"), "a refused search makes no index"


def test_the_cli_refuses_the_same_query_with_the_same_words(log):
    r = subprocess.run([cli(), "search", str(log), "?!"], capture_output=True, text=True)
    assert r.returncode == 2
    with pytest.raises(ValueError) as e:
        wmreplay.search(log, "?!")
    assert str(e.value) in r.stderr


@pytest.mark.parametrize("options", [
    {"limit": 2.0}, {"limit": "5"}, {"limit": True}, {"kinds": "text_input"}, {"since": "0"},
    {"until": False}, {"session": 1}, {"tail": 5},
])
def test_wrong_types_raise_type_error(log, options):
    with pytest.raises(TypeError):
        wmreplay.search(log, "invoice", **options)
    with pytest.raises(TypeError):
        wmreplay.search(log, 42)


def test_a_missing_log_finds_nothing_and_makes_no_index(tmp_path):
    missing = tmp_path / "nowhere.log"
    assert wmreplay.search(missing, "invoice") == []
    index = wmreplay.SearchIndex(missing)
    assert index.search("invoice") == []
    assert index.refresh() == {"rebuilt": False, "bytes": 0, "records": 0}
    assert not os.path.exists(f"{missing}.wmreplay.idx")
    # Once it exists, the same index finds what it holds.
    missing.write_text(LOG)
    assert len(index.search("invoice")) == 3


def test_trouble_with_the_log_or_the_index_is_an_os_error_naming_the_file(log, tmp_path):
    with pytest.raises(IsADirectoryError) as e:
        wmreplay.search(tmp_path, "invoice")
    assert e.value.filename == str(tmp_path)
    # The index cannot be made: where its folder should be is the log, a file.
    nowhere = os.path.join(str(log), "wm.idx")
    for call in [lambda: wmreplay.search(log, "invoice", index_path=nowhere),
                 lambda: wmreplay.SearchIndex(log, index_path=nowhere).refresh()]:
        with pytest.raises(OSError) as e:
            call()
        assert e.value.filename.startswith(str(log) + os.sep), e.value.filename
        assert str(log) in str(e.value)


def test_language_stems_or_not_and_identifiers_as_the_cli(tmp_path):
    p = tmp_path / "lang.log"
    first = json.dumps({"type": "text_input", "ts_ms": 1, "text": "We went hiking with the pets"})
    p.write_text(first + "\n"
                 + json.dumps({"type": "wm_event", "ts_ms": 2, "dia_id": "D1:13", "text": "what did they do"})
                 + "\n")
    # English by default: a stem finds its inflections.
    assert [h["offset"] for h in wmreplay.search(p, "hike pet")] == [0]
    # Without stemming the words differ; the index is built again for it.
    assert wmreplay.search(p, "hike pet", language="none") == []
    assert wmreplay.search(p, "hiking", language="none") == cli_hits(p, "hiking", "--language", "none")
    # An identifier is found whole, and the query's stop words do not count.
    hits = wmreplay.search(p, "What did D1:13 do?")
    assert [h["offset"] for h in hits] == [len(first) + 1]
    assert hits == cli_hits(p, "What did D1:13 do?")
    index = wmreplay.SearchIndex(p, language="en")
    assert [h["offset"] for h in index.search("pets")] == [0]
    with pytest.raises(ValueError, match="unknown language"):
        wmreplay.search(p, "x", language="klingon")
    with pytest.raises(ValueError, match="unknown language"):
        wmreplay.SearchIndex(p, language="klingon")


class _Embeddings:
    """A deterministic stand-in for an OpenAI-compatible embeddings API (the
    engine's HTTP client is what is tested): each word, a few synonyms
    folded together, adds to one of 64 dimensions."""

    SYNONYMS = {"canine": "dog", "puppy": "dog", "automobile": "car"}

    def __init__(self):
        import http.server
        import re
        import zlib

        owner = self
        self.calls = 0

        def vector(text):
            v = [0.0] * 64
            for w in re.findall(r"[a-z]+", text.lower()):
                w = owner.SYNONYMS.get(w, w)
                v[zlib.crc32(w.encode()) % 64] += 1.0
            return v

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                owner.calls += 1
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                data = [{"object": "embedding", "index": i, "embedding": vector(t)}
                        for i, t in enumerate(body["input"])]
                out = json.dumps({"object": "list", "data": data, "model": body["model"],
                                  "usage": {"prompt_tokens": 1, "total_tokens": 1}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_hybrid_search_takes_the_cli_embed_options_and_gives_its_hits(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    api = _Embeddings()
    try:
        p = tmp_path / "hybrid.log"
        lines = [{"type": "text_input", "ts_ms": 1, "text": "my dog barks at the mail carrier"},
                 {"type": "text_input", "ts_ms": 2, "text": "the car needs new tyres"},
                 {"type": "wm_event", "ts_ms": 3, "text": "calendar synced"}]
        p.write_text("".join(json.dumps(l) + "\n" for l in lines))
        # By words alone, nothing says "canine".
        assert wmreplay.search(p, "canine") == []
        opts = {"embed_upstream": api.url, "embed_model": "mock-embed"}
        hits = wmreplay.search(p, "canine", **opts)
        assert hits and hits[0]["record"] == lines[0]
        assert api.calls >= 2  # the records, then the query
        args = ["--embed-upstream", api.url, "--embed-model", "mock-embed"]
        assert hits == cli_hits(p, "canine", *args)
        # The fusion's weight, as --embed-weight: the vectors' nearest, found by no word, scores the weight.
        weighted = wmreplay.search(p, "canine", embed_weight=2, **opts)
        assert weighted == cli_hits(p, "canine", *args, "--embed-weight", "2")
        assert abs(weighted[0]["score"] - 2) < 1e-9
        index = wmreplay.SearchIndex(p, embed_upstream=api.url, embed_model="mock-embed", embed_timeout=5)
        car = len(json.dumps(lines[0])) + 1
        assert [h["offset"] for h in index.search("automobile", limit=1)] == [car]
    finally:
        api.close()
    # A model that cannot be reached: the search is by words.
    assert wmreplay.search(p, "car", embed_upstream="http://127.0.0.1:9", embed_model="mock-embed",
                           embed_timeout=0.5)[0]["record"] == lines[1]
    for options, name in [({"embed_upstream": "http://x"}, "embed_model"),
                          ({"embed_model": "m"}, "embed_upstream"),
                          ({"embed_dimensions": 8}, "embed_dimensions"),
                          ({"embed_weight": 1}, "embed_weight"),
                          ({"embed_upstream": "http://x", "embed_model": "m", "embed_weight": -1}, "embed_weight"),
                          ({"embed_upstream": "http://x", "embed_model": "m", "embed_weight": float("nan")},
                           "embed_weight"),
                          ({"embed_upstream": "ftp://x", "embed_model": "m"}, "http or https")]:
        with pytest.raises(ValueError, match=name):
            wmreplay.search(p, "car", **options)
