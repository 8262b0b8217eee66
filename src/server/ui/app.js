// wmreplay's memory inspector. Read-only: every request is a GET but the
// search, a JSON POST that changes nothing. Every text of the log is set
// with textContent, never parsed as markup.
"use strict";

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
};

const state = {
  mode: "one", // or "dir"
  log: null, // the log's id under --log-dir
  view: "timeline",
  token: sessionStorage.getItem("wmreplay-token") || "",
};

// ---------------------------------------------------------------- requests

function base() {
  return state.mode === "dir" && state.log ? `/v1/logs/${encodeURIComponent(state.log)}` : "/v1";
}

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

let asking = null;
function askToken(refused) {
  if (!asking) {
    asking = new Promise((resolve) => {
      const d = $("token-dialog");
      $("token-note").textContent = refused ? "The server refused that token: check it and try again." : "";
      $("token-form").onsubmit = () => {
        state.token = $("token-input").value.trim();
        sessionStorage.setItem("wmreplay-token", state.token);
        asking = null;
        resolve();
      };
      // Escape closes the dialog: the page says what it lacks.
      d.oncancel = () => {
        asking = null;
        status("this server needs a token: reload the page to give one", true);
        resolve();
      };
      d.showModal();
      $("token-input").focus();
    });
  }
  return asking;
}

async function api(path, opts) {
  const o = opts || {};
  for (let tries = 0; tries < 4; tries++) {
    const r = await fetch(path, { method: o.method || "GET", headers: headers(o.headers), body: o.body, signal: o.signal });
    if (r.status === 401) {
      if (tries === 3) break;
      await askToken(!!state.token);
      if (!state.token) break;
      continue;
    }
    const text = await r.text();
    let body = null;
    try { body = JSON.parse(text); } catch (_) { body = null; }
    if (!r.ok) {
      const msg = (body && body.error && (body.error.message || body.error)) || text || r.statusText;
      throw new Error(`${r.status}: ${typeof msg === "string" ? msg : JSON.stringify(msg)}`);
    }
    return body;
  }
  throw new Error("the server refused the token");
}

function status(text, isError) {
  const s = $("status");
  s.textContent = text || "";
  s.classList.toggle("error", !!isError);
}

const fmt = {
  bytes(n) {
    if (n === null || n === undefined) return "";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0; let v = n;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return `${i ? v.toFixed(1) : v} ${u[i]}`;
  },
  num(n) { return n === null || n === undefined ? "" : Number(n).toLocaleString("en-US"); },
  ts(ms) {
    if (typeof ms !== "number" || !isFinite(ms)) return String(ms);
    if (ms > 1e11 && ms < 1e14) {
      const d = new Date(ms);
      return d.toISOString().replace("T", " ").replace("Z", "");
    }
    return String(ms);
  },
};

function kindClass(e, kind) {
  e.classList.add(`k-${String(kind).replace(/[^A-Za-z0-9_-]/g, "_")}`);
  if (!["text_input", "text_output", "wm_summary", "wm_fact", "wm_facts"].includes(kind)) {
    let h = 0;
    for (const c of String(kind)) h = (h * 31 + c.codePointAt(0)) % 360;
    e.style.setProperty("--k", `hsl(${h} 55% 50%)`);
  }
}

// ------------------------------------------------------------------ views

const views = ["logs", "timeline", "turn", "memory", "search"];

function show(view, push) {
  if (state.view !== view) status("");
  state.view = view;
  for (const v of views) {
    $(`view-${v}`).hidden = v !== view;
    const tab = $(`tab-${v}`);
    tab.setAttribute("aria-selected", String(v === view));
    tab.tabIndex = v === view ? 0 : -1;
  }
  if (push !== false) writeHash();
  if (view === "logs") loadLogs();
  if (view === "timeline") timeline.open();
  if (view === "memory") loadMemory();
  if (view === "search") $("search-q").focus();
}

function writeHash() {
  const p = new URLSearchParams();
  if (state.log) p.set("log", state.log);
  if (state.view === "turn" && turn.offset !== null) p.set("offset", String(turn.offset));
  const q = p.toString();
  history.replaceState(null, "", `#${state.view}${q ? "?" + q : ""}`);
}

function readHash() {
  const h = location.hash.replace(/^#/, "");
  const [view, q] = h.split("?");
  const p = new URLSearchParams(q || "");
  return { view: views.includes(view) ? view : "timeline", offset: p.get("offset"), log: p.get("log") };
}

// Another log (from the picker or the address): the views start afresh.
function switchLog(id) {
  const pick = $("log-select");
  if (state.mode !== "dir" || !id || id === state.log) return;
  if (![...pick.options].some((o) => o.value === id)) {
    status(`no log named ${id}`, true);
    return;
  }
  state.log = id;
  pick.value = id;
  timeline.stopTail();
  timeline.opened = false;
  timeline.selected = null;
  timeline.filters = { kinds: [], session: "", since: "", until: "" };
  syncFilters();
}

// ------------------------------------------------------------------- logs

async function loadLogs() {
  const body = $("logs-table").tBodies[0];
  body.replaceChildren();
  try {
    let logs;
    if (state.mode === "dir") {
      logs = (await api("/v1/logs")).logs;
    } else {
      logs = [{ id: null }];
    }
    for (const l of logs) {
      const tr = el("tr");
      tr.tabIndex = 0;
      tr.setAttribute("aria-selected", String((l.id || null) === (state.log || null)));
      const name = el("td", "mono", l.id || "(the log)");
      const size = el("td", "", fmt.bytes(l.bytes));
      const recs = el("td", "", "…");
      const last = el("td", "", l.modified_ms ? fmt.ts(l.modified_ms) : "…");
      const skipped = el("td", "", "…");
      tr.append(name, size, recs, last, skipped);
      body.append(tr);
      const pick = () => { if (l.id) { state.log = l.id; $("log-select").value = l.id; } show("timeline"); };
      tr.addEventListener("click", pick);
      tr.addEventListener("keydown", (e) => { if (e.key === "Enter") pick(); });
      if (state.mode === "one" || l.id === state.log) {
        const prefix = l.id ? `/v1/logs/${encodeURIComponent(l.id)}` : "/v1";
        fillLog(prefix, size, recs, last, skipped);
      } else {
        recs.textContent = ""; skipped.textContent = "";
      }
    }
  } catch (e) {
    status(`logs: ${e.message}`, true);
  }
}

async function fillLog(prefix, size, recs, last, skipped) {
  const [stats, tl] = await Promise.all([api(`${prefix}/stats`), api(`${prefix}/timeline?limit=1`)]);
  size.textContent = fmt.bytes(stats.log_bytes);
  recs.textContent = fmt.num(tl.total);
  last.textContent = tl.last_ts_ms !== null && tl.last_ts_ms !== undefined ? fmt.ts(tl.last_ts_ms) : "no records";
  const s = stats.stats || {};
  const n = (s.skipped_invalid_json || 0) + (s.skipped_invalid_shape || 0);
  skipped.textContent = fmt.num(n);
  const body = $("skips-table").tBodies[0];
  body.replaceChildren();
  for (const k of s.skips || []) {
    const tr = el("tr");
    const b = el("button", "", "Show");
    b.setAttribute("aria-label", `Show line ${k.line} as written`);
    b.addEventListener("click", async () => {
      const r = await api(`${prefix}/timeline/record?offset=${k.offset}`);
      const pre = $("skip-line");
      pre.hidden = false;
      pre.textContent = (r.valid_utf8 ? "" : "(not valid UTF-8: shown with replacement characters)\n") + r.text + (r.truncated ? "\n… (the first MiB)" : "");
    });
    tr.append(el("td", "", k.line), el("td", "mono", k.offset), el("td", "", k.reason), el("td").appendChild(b).parentNode);
    body.append(tr);
  }
  const listed = (s.skips || []).length;
  if (listed < n || !n) {
    const tr = el("tr");
    const td = el("td", "hint", n ? `${fmt.num(n - listed)} more skipped lines are not listed` : "none");
    td.colSpan = 4;
    tr.append(td);
    body.append(tr);
  }
}

// --------------------------------------------------------------- timeline

const BLOCK = 100; // rows a request asks for (at most 200 are served)
const MAX_PX = 8e6; // the spacer's height at most (browsers cap elements)

const timeline = {
  filters: { kinds: [], session: "", since: "", until: "" },
  range: [0, 0],
  total: 0,
  blocks: new Map(), // unfiltered: block number -> rows
  loading: new Set(),
  list: [], // filtered: the rows found so far
  next: 0,
  filtered: false,
  selected: null, // row index (unfiltered: absolute; filtered: in list)
  opened: false,
  gen: 0,
  tail: null,

  count() { return this.filtered ? this.list.length : this.range[1] - this.range[0]; },
  get(k) {
    if (this.filtered) return this.list[k] || null;
    const abs = this.range[0] + k;
    const b = this.blocks.get(Math.floor(abs / BLOCK));
    return b ? b[abs % BLOCK] || null : null;
  },
  scale() {
    const full = this.count() * rowHeight();
    return full > MAX_PX ? MAX_PX / full : 1;
  },
  // The row at the top of the screen for a scroll position, and back:
  // linear from the first row to the last screenful, so that every row
  // can be reached however the spacer's height was capped.
  posOf(scrollTop) {
    const sc = $("tl-scroller");
    const h = rowHeight();
    if (this.scale() === 1) return scrollTop / h;
    const room = Math.max(1, sc.scrollHeight - sc.clientHeight);
    const rows = Math.max(0, this.count() - sc.clientHeight / h);
    return (Math.min(scrollTop, room) / room) * rows;
  },
  scrollOf(pos) {
    const sc = $("tl-scroller");
    const h = rowHeight();
    if (this.scale() === 1) return pos * h;
    const room = Math.max(1, sc.scrollHeight - sc.clientHeight);
    const rows = Math.max(1, this.count() - sc.clientHeight / h);
    return (Math.max(0, Math.min(pos, rows)) / rows) * room;
  },

  query(extra) {
    const p = new URLSearchParams(extra || {});
    const f = this.filters;
    if (f.kinds.length) p.set("kinds", f.kinds.join(","));
    if (f.session) p.set("session", f.session);
    if (f.since !== "") p.set("since", f.since);
    if (f.until !== "") p.set("until", f.until);
    return p.toString();
  },

  async open() {
    if (!this.opened) {
      this.opened = true;
      await this.reload();
    } else {
      this.render();
    }
    this.follow();
    $("tl-scroller").focus({ preventScroll: true });
  },

  async reload(focusOffset) {
    const gen = ++this.gen;
    this.blocks.clear(); this.loading.clear(); this.list = []; this.next = 0;
    this.filtered = !!(this.filters.kinds.length || this.filters.session);
    const extra = { limit: String(BLOCK) };
    if (focusOffset) { extra.around = String(focusOffset.offset); extra.ts_ms = String(focusOffset.ts_ms); }
    const t0 = performance.now();
    const r = await api(`${base()}/timeline?${this.query(extra)}`);
    if (gen !== this.gen) return;
    this.total = r.total;
    this.range = r.range;
    if (this.filtered) {
      this.list = r.records;
      this.next = r.next;
    } else {
      this.store(r.records);
    }
    if (!this.filtered && Object.keys(r.kinds || {}).length) this.fillKinds(r.kinds);
    this.count_text();
    this.sizeSpacer();
    const sc = $("tl-scroller");
    if (r.focus !== null && r.focus !== undefined && !this.filtered) {
      this.select(r.focus - this.range[0], true);
    } else if (this.filtered) {
      sc.scrollTop = 0;
    } else if ($("tl-follow").checked && !this.filters.since && !this.filters.until) {
      // The newest records, unless a time range was asked for: its start.
      sc.scrollTop = sc.scrollHeight;
    } else {
      sc.scrollTop = 0;
    }
    this.render();
    status(`timeline: ${fmt.num(r.total)} records, ${Math.round(performance.now() - t0)} ms`);
  },

  fillKinds(kinds) {
    const s = $("tl-kinds");
    const chosen = new Set(this.filters.kinds);
    s.replaceChildren();
    for (const [k, n] of Object.entries(kinds)) {
      const o = el("option", "", `${k} (${fmt.num(n)})`);
      o.value = k;
      o.selected = chosen.has(k);
      s.append(o);
    }
    s.size = Math.min(4, Math.max(1, s.options.length));
  },

  count_text() {
    const c = this.count();
    $("tl-count").textContent = this.filtered
      ? `${fmt.num(c)} matching${this.next !== null ? " so far" : ""} of ${fmt.num(this.total)}`
      : `${fmt.num(c)} of ${fmt.num(this.total)} records`;
  },

  store(rows) {
    for (const r of rows) {
      const b = Math.floor(r.i / BLOCK);
      if (!this.blocks.has(b)) this.blocks.set(b, []);
      this.blocks.get(b)[r.i % BLOCK] = r;
    }
    // Keep the cache bounded: the blocks farthest from here go.
    if (this.blocks.size > 60) {
      const here = Math.floor((this.range[0] + this.firstVisible()) / BLOCK);
      const far = [...this.blocks.keys()].sort((a, b) => Math.abs(b - here) - Math.abs(a - here));
      for (const b of far.slice(0, this.blocks.size - 60)) this.blocks.delete(b);
    }
  },

  // The scroller's height for the rows (capped: see scale()).
  sizeSpacer() {
    $("tl-spacer").style.height = `${Math.max(1, this.count() * rowHeight() * this.scale())}px`;
  },

  firstVisible() {
    return Math.floor(this.posOf($("tl-scroller").scrollTop));
  },

  async ensure(first, last) {
    if (this.filtered) {
      if (last >= this.list.length - 1 && this.next !== null && !this.loading.has("more")) {
        this.loading.add("more");
        const gen = this.gen;
        try {
          const r = await api(`${base()}/timeline?${this.query({ from: String(this.next), limit: "200" })}`);
          if (gen !== this.gen) return;
          this.list.push(...r.records);
          this.next = r.next;
          this.total = r.total;
          this.sizeSpacer();
          this.count_text();
        } finally {
          this.loading.delete("more");
        }
        this.render();
      }
      return;
    }
    const lo = this.range[0] + first; const hi = this.range[0] + last;
    for (let b = Math.floor(lo / BLOCK); b <= Math.floor(hi / BLOCK); b++) {
      const start = Math.max(b * BLOCK, this.range[0]);
      const have = this.blocks.get(b);
      const want = Math.min(BLOCK, this.range[1] - start);
      const full = have && have.filter(Boolean).length >= Math.min(want, BLOCK - (start - b * BLOCK));
      if (full || this.loading.has(b) || start >= this.range[1]) continue;
      this.loading.add(b);
      const gen = this.gen;
      api(`${base()}/timeline?${this.query({ from: String(start), limit: String((b + 1) * BLOCK - start) })}`)
        .then((r) => {
          if (gen !== this.gen) return;
          this.store(r.records);
          this.render();
        })
        .catch((e) => status(`timeline: ${e.message}`, true))
        .finally(() => this.loading.delete(b));
    }
  },

  render() {
    const sc = $("tl-scroller");
    const rows = $("tl-rows");
    const h = rowHeight();
    const n = this.count();
    const pos = this.posOf(sc.scrollTop);
    const first = Math.max(0, Math.min(Math.floor(pos), Math.max(0, n - 1)));
    const visible = Math.ceil(sc.clientHeight / h) + 1;
    const last = Math.min(n - 1, first + visible);
    rows.style.top = `${sc.scrollTop - (pos - first) * h}px`;
    rows.replaceChildren();
    for (let k = first; k <= last; k++) rows.append(this.rowEl(k));
    // A filtered list shorter than the screen asks for more (a scan may
    // find nothing in one request and say where to go on).
    if (n || (this.filtered && this.next !== null)) this.ensure(first, Math.max(last, visible));
    if (this.filtered && this.next !== null && !n) {
      rows.append(el("div", "row pending", "Looking further into the log…"));
    }
  },

  rowEl(k) {
    const r = this.get(k);
    const d = el("div", "row");
    d.setAttribute("role", "option");
    d.id = `row-${k}`;
    d.setAttribute("aria-selected", String(k === this.selected));
    d.dataset.k = String(k);
    if (!r) {
      d.classList.add("pending");
      d.append(el("span", "stripe"), el("span", "i", fmt.num((this.filtered ? 0 : this.range[0]) + k)), el("span", "ts", ""), el("span", "kind", ""), el("span", "sess", ""), el("span", "text", "…"));
      return d;
    }
    kindClass(d, r.type);
    const sess = r.session_id === null || r.session_id === undefined ? "" : String(r.session_id);
    d.append(
      el("span", "stripe"),
      el("span", "i", `#${fmt.num(r.i)}`),
      el("span", "ts", fmt.ts(r.ts_ms)),
      el("span", "kind", r.type),
      el("span", "sess", sess),
      el("span", "text", r.text),
    );
    if (sess) d.children[4].title = `session ${sess}`;
    d.setAttribute("aria-label", `${r.type}${sess ? " in " + sess : ""}: ${r.text}`);
    return d;
  },

  select(k, scroll) {
    const n = this.count();
    if (!n) return;
    k = Math.max(0, Math.min(n - 1, k));
    this.selected = k;
    const sc = $("tl-scroller");
    if (scroll) {
      const pos = this.posOf(sc.scrollTop);
      const shown = sc.clientHeight / rowHeight();
      if (k < pos || k + 1 > pos + shown) {
        sc.scrollTop = this.scrollOf(k - shown / 3);
      }
    }
    this.render();
    sc.setAttribute("aria-activedescendant", `row-${k}`);
    const r = this.get(k);
    if (r) this.detail(r);
  },

  async detail(r) {
    const box = $("tl-detail");
    box.replaceChildren();
    const meta = el("p", "meta", `#${fmt.num(r.i)} · ${r.type} · ts_ms ${r.ts_ms} (${fmt.ts(r.ts_ms)}) · byte ${fmt.num(r.offset)}${r.session_id ? " · session " + r.session_id : ""}`);
    const b = el("button", "", "The turn as the model saw it (t)");
    b.addEventListener("click", () => turn.open(r));
    const pre = el("pre", "raw", "…");
    pre.setAttribute("aria-label", "The record as written");
    box.append(meta, b, pre);
    try {
      const rec = await api(`${base()}/timeline/record?offset=${r.offset}`);
      pre.textContent = rec.json !== null ? JSON.stringify(rec.json, null, 2) : rec.text;
      if (rec.truncated) pre.textContent += "\n… (the first MiB of the line)";
    } catch (e) {
      pre.textContent = e.message;
    }
  },

  follow() {
    if (this.tail) return;
    const ctl = new AbortController();
    this.tail = ctl;
    let rebuilds = null;
    tailStream(`${base()}/timeline/tail`, ctl.signal, (ev, data) => {
      if (ev !== "grew" || this.tail !== ctl) return;
      if (rebuilds !== null && data.rebuilds !== rebuilds) {
        // The log was replaced or rewritten: every row may have changed.
        rebuilds = data.rebuilds;
        status("the log was rewritten: read again");
        this.reload().catch((e) => status(e.message, true));
        return;
      }
      rebuilds = data.rebuilds;
      if (data.total === this.total) return;
      this.grew(data.total);
    }).catch(() => {}).finally(() => { if (this.tail === ctl) this.tail = null; });
  },

  stopTail() {
    if (this.tail) { this.tail.abort(); this.tail = null; }
  },

  grew(total) {
    this.total = total;
    if (this.filtered) {
      if (this.next === null) this.next = this.list.length ? this.list[this.list.length - 1].i + 1 : this.range[1];
      this.count_text();
      if ($("tl-follow").checked) this.ensure(0, this.list.length - 1);
      return;
    }
    if (this.filters.until !== "") return;
    // A late record lands before newer ones, anywhere: the rows on screen
    // are asked again (a request of 100 rows costs milliseconds).
    this.range = [this.range[0], total];
    this.blocks.clear();
    // Followed only from the end: a reader scrolled up stays where they are.
    const sc = $("tl-scroller");
    const atEnd = sc.scrollTop + sc.clientHeight >= sc.scrollHeight - 2 * rowHeight();
    this.sizeSpacer();
    this.count_text();
    if ($("tl-follow").checked && atEnd && state.view === "timeline") sc.scrollTop = sc.scrollHeight;
    this.render();
  },
};

function rowHeight() {
  return parseFloat(getComputedStyle(document.documentElement).getPropertyValue("--row")) || 30;
}

// Server-sent events read with fetch (so the token goes in a header).
async function tailStream(url, signal, on) {
  const r = await fetch(url, { headers: headers({ Accept: "text/event-stream" }), signal });
  if (r.status === 401) { await askToken(); return; }
  if (!r.ok || !r.body) return;
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let ev = "message"; let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) ev = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (data) { try { on(ev, JSON.parse(data)); } catch (_) { /* not JSON */ } }
    }
  }
}

function parseTime(s) {
  s = s.trim();
  if (!s) return "";
  if (/^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(s)) return s;
  const t = Date.parse(s);
  if (isNaN(t)) throw new Error(`not a ts_ms or a date: ${s}`);
  return String(t);
}

// ------------------------------------------------------------------- turn

const turn = {
  offset: null,
  data: null,
  selected: null,

  async open(r, focus) {
    this.offset = r.offset;
    show("turn");
    $("turn-empty").hidden = true;
    $("turn-body").hidden = false;
    $("turn-point").textContent = "Replaying…";
    try {
      const t0 = performance.now();
      const d = await api(`${base()}/inspect/turn?offset=${r.offset}`);
      this.data = d;
      this.render(d);
      if (focus && $("turn-parts").firstChild) $("turn-parts").firstChild.focus();
      status(`turn: ${Math.round(performance.now() - t0)} ms (replay ${Math.round(d.replay_ms)} ms)`);
    } catch (e) {
      $("turn-point").textContent = e.message;
    }
  },

  render(d) {
    const p = d.point;
    $("turn-point").textContent = `${p.type} #${fmt.num(p.i)} at ${fmt.ts(p.ts_ms)}${p.session_id ? " in session " + p.session_id : ""}: “${p.text}”`;
    const w = d.window;
    let why = `Window: ${w.why}. ${fmt.num(w.selected_records)} of ${fmt.num(w.matched_records)} records replayed`;
    if (w.window_tokens !== null) why += `, ${fmt.num(w.window_tokens)} tokens`;
    if (w.window_start) why += `; it starts at the record at byte ${fmt.num(w.window_start.offset)} (${fmt.ts(w.window_start.ts_ms)})`;
    why += ".";
    const on = [];
    if (w.summaries) on.push("summaries");
    if (w.facts) on.push("facts");
    if (w.recall) on.push(`recall (${w.recall})`);
    if (w.cache_breakpoints) on.push("cache breakpoints");
    if (on.length) why += ` With ${on.join(", ")}.`;
    $("turn-why").textContent = why;
    const list = $("turn-parts");
    list.replaceChildren();
    let most = 1; let total = 0; let estimated = false;
    for (const x of d.parts) { most = Math.max(most, x.tokens); total += x.tokens; estimated = estimated || x.estimated; }
    $("turn-total").textContent = `${fmt.num(d.parts.length)} messages, ${estimated ? "about " : ""}${fmt.num(total)} tokens (${w.tokenizer}), ${fmt.bytes(d.request_bytes)}`;
    // At most 1,000 messages on the page: the first and last 500.
    const SHOWN = 500;
    const cut = d.parts.length > 2 * SHOWN;
    d.parts.forEach((x, k) => {
      if (cut && k >= SHOWN && k < d.parts.length - SHOWN) {
        if (k === SHOWN) {
          const hidden = d.parts.slice(SHOWN, d.parts.length - SHOWN);
          const t = hidden.reduce((a, y) => a + y.tokens, 0);
          list.append(el("li", "cut", `… ${fmt.num(hidden.length)} more messages (${fmt.num(t)} tokens) not listed`));
        }
        return;
      }
      const li = el("li");
      li.tabIndex = list.children.length ? -1 : 0;
      li.setAttribute("role", "option");
      li.setAttribute("aria-selected", "false");
      kindClass(li, x.kind);
      const bar = el("span", "bar");
      bar.style.width = `${Math.max(1, (100 * x.tokens) / most)}%`;
      const barBox = el("span", "barbox");
      barBox.append(bar);
      const label = x.kind + (x.cache_breakpoint ? " ⚑" : "");
      const tok = (x.estimated ? "~" : "") + fmt.num(x.tokens);
      li.append(el("span", "stripe"), el("span", "kind", label), el("span", "ts", x.ts_ms ? fmt.ts(Number(x.ts_ms)) : x.role), barBox, el("span", "tok", tok));
      li.setAttribute("aria-label", `${x.kind}, ${x.estimated ? "about " : ""}${x.tokens} tokens${x.cache_breakpoint ? ", cache breakpoint" : ""}`);
      if (x.cache_breakpoint) li.title = "A prompt-cache breakpoint closes this message";
      const pick = () => this.pick(k, li);
      li.addEventListener("click", pick);
      li.addEventListener("keydown", (e) => {
        const move = (to) => { if (to && to.tabIndex !== undefined && !to.classList.contains("cut")) { e.preventDefault(); li.tabIndex = -1; to.tabIndex = 0; to.focus(); } };
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); }
        if (e.key === "ArrowDown" || e.key === "j") move(li.nextSibling && li.nextSibling.classList.contains("cut") ? li.nextSibling.nextSibling : li.nextSibling);
        if (e.key === "ArrowUp" || e.key === "k") move(li.previousSibling && li.previousSibling.classList.contains("cut") ? li.previousSibling.previousSibling : li.previousSibling);
      });
      list.append(li);
    });
    const raw = $("turn-raw");
    raw.textContent = "";
    raw.parentElement.open = false;
    raw.parentElement.ontoggle = () => {
      if (!raw.parentElement.open || raw.textContent) return;
      raw.textContent = d.request !== null
        ? JSON.stringify(d.request, null, 2)
        : `The body is ${fmt.bytes(d.request_bytes)}: too large to show here. GET ${base()}/inspect/turn?offset=${d.point.offset}&raw=1 returns it as sent.`;
    };
    $("turn-answer").textContent = d.answer ? `${d.answer.text}\n\n(text_output #${fmt.num(d.answer.i)}, ${fmt.ts(d.answer.ts_ms)})` : "No answer in the log after this point (none yet, or the turn failed).";
    $("turn-message").textContent = "Pick a message on the left.";
    writeHash();
  },

  pick(k, li) {
    for (const c of $("turn-parts").children) c.setAttribute("aria-selected", "false");
    li.setAttribute("aria-selected", "true");
    const x = this.data.parts[k];
    const req = this.data.request;
    if (req === null) {
      $("turn-message").textContent = `The request is ${fmt.bytes(this.data.request_bytes)}: its messages are not part of this view. GET ${base()}/inspect/turn?offset=${this.data.point.offset}&raw=1 returns it.`;
      return;
    }
    let text = "";
    if (x.at === "system") {
      text = typeof req.system === "string" ? req.system : (req.system || []).map((b) => b.text).join("");
      if (!text && req.messages && req.messages[0] && req.messages[0].role === "system") text = req.messages[0].content;
    } else {
      const m = req.messages[x.at];
      text = typeof m.content === "string" ? m.content : (m.content || []).map((b) => b.text || "").join("");
    }
    $("turn-message").textContent = text;
  },
};

// ----------------------------------------------------------------- memory

async function loadMemory() {
  const facts = $("mem-facts"); const files = $("mem-files"); const sums = $("mem-summaries");
  for (const b of [facts, files, sums]) b.replaceChildren(el("p", "hint", "…"));
  try {
    const m = await api(`${base()}/memory`);
    fillFacts(facts, m.facts, "No facts.");
    fillFacts(files, m.files, "No memory files.");
    sums.replaceChildren();
    if (!m.summaries.length) sums.append(el("p", "hint", "No summaries."));
    for (const s of m.summaries) {
      const c = el("div", "card");
      kindClass(c, "wm_summary");
      c.append(el("h3", "", `summary #${fmt.num(s.i)} · ${fmt.ts(s.ts_ms)}`));
      const cov = s.valid
        ? `covers ${fmt.num(s.covers_rows)} records, up to ts_ms ${s.covers.ts_ms} (${fmt.ts(s.covers.ts_ms)}), byte ${fmt.num(s.covers.offset)}`
        : "no valid cover: not replayed";
      c.append(el("p", "meta", cov));
      c.append(el("div", "val", s.text));
      if (s.valid) {
        const b = el("button", "", "Show what it folded away");
        b.addEventListener("click", () => {
          timeline.filters = { kinds: [], session: "", since: "", until: String(s.covers.ts_ms) };
          syncFilters();
          show("timeline");
          timeline.reload();
        });
        c.append(b);
      }
      sums.append(c);
    }
  } catch (e) {
    status(`memory: ${e.message}`, true);
  }
}

function fillFacts(box, list, none) {
  box.replaceChildren();
  if (!list.length) box.append(el("p", "hint", none));
  for (const f of list) {
    const c = el("div", f.live ? "card" : "card dead");
    c.append(el("h3", "", f.key));
    c.append(el("div", "val", f.live ? (typeof f.value === "string" ? f.value : JSON.stringify(f.value, null, 2)) : "(deleted)"));
    const d = el("details");
    d.append(el("summary", "", `${f.versions} version${f.versions === 1 ? "" : "s"}`));
    const ol = el("ol");
    for (const v of f.history) {
      const li = el("li", "", `${fmt.ts(v.ts_ms)}: ${v.value === null ? "(deleted)" : typeof v.value === "string" ? v.value : JSON.stringify(v.value)}`);
      ol.append(li);
    }
    d.append(ol);
    c.append(d);
    box.append(c);
  }
}

// ----------------------------------------------------------------- search

async function search(q) {
  const out = $("search-hits");
  out.replaceChildren();
  $("search-count").textContent = "…";
  try {
    const t0 = performance.now();
    const r = await api(`${base()}/search`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ query: q, limit: 20 }),
    });
    $("search-count").textContent = `${r.hits.length} hits, ${Math.round(performance.now() - t0)} ms`;
    const words = q.toLowerCase().match(/[\p{L}\p{N}_]+/gu) || [];
    for (const h of r.hits) {
      const li = el("li");
      li.append(el("div", "meta", `${h.type} · ${fmt.ts(h.ts_ms)} · score ${Number(h.score).toFixed(3)}`));
      const ctx = el("ol", "ctx");
      ctx.setAttribute("aria-label", "The turns around the hit");
      li.append(ctx);
      const open = el("button", "", "Show in the timeline");
      open.addEventListener("click", () => {
        timeline.filters = { kinds: [], session: "", since: "", until: "" };
        syncFilters();
        timeline.opened = true;
        show("timeline");
        timeline.reload({ offset: h.offset, ts_ms: h.ts_ms });
      });
      li.append(open);
      out.append(li);
      api(`${base()}/timeline?${new URLSearchParams({ around: String(h.offset), ts_ms: String(h.ts_ms), limit: "7" })}`)
        .then((t) => {
          for (const row of t.records.slice(Math.max(0, t.focus - t.from - 3), t.focus - t.from + 4)) {
            const c = el("li", row.i === t.focus ? "hit" : "");
            const text = row.i === t.focus && h.record ? recordText(h.record) : row.text;
            c.append(el("b", "", `${row.type}: `));
            if (row.i === t.focus) highlight(c, text, words); else c.append(document.createTextNode(text));
            ctx.append(c);
          }
        })
        .catch((e) => ctx.append(el("li", "error", e.message)));
    }
  } catch (e) {
    $("search-count").textContent = e.message;
  }
}

function recordText(rec) {
  let o = rec;
  if (typeof rec === "string") { try { o = JSON.parse(rec); } catch (_) { return rec; } }
  if (o && typeof o.text === "string") return o.text;
  return JSON.stringify(o);
}

function highlight(parent, text, words) {
  if (!words.length) { parent.append(document.createTextNode(text)); return; }
  const re = new RegExp(`(${words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})`, "giu");
  let last = 0;
  for (const m of text.matchAll(re)) {
    parent.append(document.createTextNode(text.slice(last, m.index)));
    parent.append(el("mark", "", m[0]));
    last = m.index + m[0].length;
  }
  parent.append(document.createTextNode(text.slice(last)));
}

// ---------------------------------------------------------------- wiring

function syncFilters() {
  const f = timeline.filters;
  $("tl-session").value = f.session;
  $("tl-since").value = f.since;
  $("tl-until").value = f.until;
  for (const o of $("tl-kinds").options) o.selected = f.kinds.includes(o.value);
}

function wire() {
  for (const v of views) $(`tab-${v}`).addEventListener("click", () => show(v));
  $("tl-filters").addEventListener("submit", (e) => {
    e.preventDefault();
    try {
      timeline.filters = {
        kinds: [...$("tl-kinds").selectedOptions].map((o) => o.value),
        session: $("tl-session").value.trim(),
        since: parseTime($("tl-since").value),
        until: parseTime($("tl-until").value),
      };
    } catch (err) {
      status(err.message, true);
      return;
    }
    timeline.selected = null;
    timeline.reload().catch((err) => status(err.message, true));
  });
  $("tl-clear").addEventListener("click", () => {
    timeline.filters = { kinds: [], session: "", since: "", until: "" };
    syncFilters();
    timeline.reload().catch((err) => status(err.message, true));
  });
  const sc = $("tl-scroller");
  let frame = 0;
  sc.addEventListener("scroll", () => {
    if (frame) return;
    frame = requestAnimationFrame(() => { frame = 0; timeline.render(); });
  });
  new ResizeObserver(() => timeline.render()).observe(sc);
  sc.addEventListener("click", (e) => {
    const row = e.target.closest(".row");
    if (row) timeline.select(Number(row.dataset.k), false);
  });
  sc.addEventListener("keydown", (e) => {
    const top = timeline.firstVisible();
    const onScreen = timeline.selected !== null && timeline.selected >= top && timeline.selected <= top + sc.clientHeight / rowHeight();
    const k = onScreen ? timeline.selected : top - 1;
    const page = Math.max(1, Math.floor(sc.clientHeight / rowHeight()) - 1);
    const moves = { ArrowDown: 1, j: 1, ArrowUp: -1, k: -1, PageDown: page, PageUp: -page };
    if (e.key in moves) { e.preventDefault(); timeline.select(k + moves[e.key], true); return; }
    if (e.key === "Home") { e.preventDefault(); timeline.select(0, true); return; }
    if (e.key === "End") { e.preventDefault(); timeline.select(timeline.count() - 1, true); return; }
    const r = timeline.selected === null ? null : timeline.get(timeline.selected);
    if (e.key === "Enter" && r) { e.preventDefault(); timeline.detail(r); }
    if (e.key === "t" && r) { e.preventDefault(); turn.open(r, true); }
  });
  $("tl-follow").addEventListener("change", (e) => {
    if (e.target.checked) { timeline.follow(); sc.scrollTop = sc.scrollHeight; }
  });
  $("search-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const q = $("search-q").value.trim();
    if (q) search(q);
  });
  $("log-select").addEventListener("change", (e) => {
    const id = e.target.value;
    e.target.value = state.log;
    switchLog(id);
    show(state.view === "turn" ? "timeline" : state.view);
  });
  document.addEventListener("keydown", (e) => {
    const t = e.target;
    if (t instanceof HTMLInputElement || t instanceof HTMLSelectElement || t instanceof HTMLTextAreaElement) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const n = "12345".indexOf(e.key);
    if (n >= 0) { e.preventDefault(); show(views[n]); if (views[n] === "timeline") sc.focus(); }
    if (e.key === "/") { e.preventDefault(); show("search"); }
  });
  $("tab-logs").parentElement.addEventListener("keydown", (e) => {
    const i = views.indexOf(state.view);
    if (e.key === "ArrowRight") { e.preventDefault(); show(views[(i + 1) % views.length]); $(`tab-${state.view}`).focus(); }
    if (e.key === "ArrowLeft") { e.preventDefault(); show(views[(i + views.length - 1) % views.length]); $(`tab-${state.view}`).focus(); }
  });
}

async function start() {
  wire();
  const info = await (await fetch("/ui/info")).json();
  state.mode = info.logs;
  if (info.auth && !state.token) await askToken();
  const h = readHash();
  const pick = $("log-select");
  if (state.mode === "dir") {
    const logs = (await api("/v1/logs")).logs;
    for (const l of logs) {
      const o = el("option", "", l.id);
      o.value = l.id;
      pick.append(o);
    }
    state.log = h.log && logs.some((l) => l.id === h.log) ? h.log : logs.length ? logs[0].id : null;
    if (h.log && h.log !== state.log) status(`no log named ${h.log}`, true);
    if (state.log) pick.value = state.log;
    if (!logs.length) { status("no logs in the directory yet"); show("logs"); return; }
  } else {
    pick.parentElement.hidden = true;
  }
  if (h.view === "turn" && h.offset) {
    turn.open({ offset: Number(h.offset) });
  } else {
    show(h.view, false);
  }
}

// A link or a hand-edited address: the view it names.
window.addEventListener("hashchange", () => {
  const h = readHash();
  switchLog(h.log);
  if (h.view === "turn" && h.offset) turn.open({ offset: Number(h.offset) });
  else show(h.view, false);
});

start().catch((e) => status(e.message, true));
