//! Session deltas (full/delta injection with prepare/ack) in the library and the CLI.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use wmreplay::state::{self, Mode, PrepareRequest, Prepared, Store};
use wmreplay::{Error, Format, ReplayOptions, Selection};

mod common;

fn append(path: &Path, s: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(s.as_bytes()).unwrap();
}

fn rec(ts: u64, text: &str) -> String {
    format!("{{\"type\":\"text_input\",\"ts_ms\":{ts},\"text\":\"{text}\"}}\n")
}

struct Fixture {
    _dir: tempfile::TempDir,
    log: std::path::PathBuf,
    store: Mutex<Store>,
    sel: Selection,
    options: ReplayOptions,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wm.log");
        let store = Mutex::new(Store::open(Store::path_for(&log)).unwrap());
        Fixture {
            _dir: dir,
            log,
            store,
            sel: Selection::default(),
            options: ReplayOptions::default(),
        }
    }

    fn prepare_as(&self, key: &str, format: Format) -> Prepared {
        state::prepare(
            &self.store,
            &PrepareRequest {
                log: &self.log,
                session_key: key,
                format,
                selection: &self.sel,
                options: &self.options,
            },
        )
        .unwrap()
    }

    fn prepare(&self, key: &str) -> Prepared {
        self.prepare_as(key, Format::Xml)
    }

    fn ack(&self, p: &Prepared, success: bool) {
        self.store
            .lock()
            .unwrap()
            .ack(&p.prepare_id, success)
            .unwrap();
    }
}

fn texts_in(body: &[u8]) -> Vec<String> {
    let s = String::from_utf8(body.to_vec()).unwrap();
    s.match_indices("\"text\":\"")
        .map(|(i, m)| {
            let rest = &s[i + m.len()..];
            rest[..rest.find('"').unwrap()].to_string()
        })
        .collect()
}

#[test]
fn full_then_delta_then_none_and_acks_move_the_position() {
    let f = Fixture::new();
    append(&f.log, &rec(1, "a"));
    append(&f.log, &rec(2, "b"));
    let p = f.prepare("k");
    assert_eq!(p.mode, Mode::Full);
    assert_eq!((p.from, p.records), (0, 2));
    assert!(String::from_utf8_lossy(&p.body).starts_with("<memory_context>\n"));
    assert_eq!(texts_in(&p.body), ["a", "b"]);
    // Not acknowledged: a prepare again is full again.
    assert_eq!(f.prepare("k").mode, Mode::Full);
    f.ack(&p, true);
    // Nothing new.
    let none = f.prepare("k");
    assert_eq!((none.mode, none.body.len()), (Mode::None, 0));
    // Two appends (one of them late, one a bad line, one not finished).
    append(&f.log, &rec(9, "c"));
    append(&f.log, "not json\n");
    append(&f.log, &rec(3, "d"));
    append(&f.log, "{\"type\":\"text_input\",\"ts");
    let d = f.prepare("k");
    assert_eq!(d.mode, Mode::Delta);
    assert_eq!(d.from, p.to);
    assert_eq!(texts_in(&d.body), ["d", "c"], "ordered among themselves");
    assert!(String::from_utf8_lossy(&d.body).starts_with(&format!(
        "<memory_delta from=\"{}\" to=\"{}\">\n",
        d.from, d.to
    )));
    // Prepared twice without an ack: the same delta.
    let d2 = f.prepare("k");
    assert_eq!((d2.from, d2.to, &d2.body), (d.from, d.to, &d.body));
    assert_ne!(d2.prepare_id, d.prepare_id);
    // A failed turn: the same delta again.
    f.ack(&d, false);
    let d3 = f.prepare("k");
    assert_eq!((d3.from, &d3.body), (d.from, &d.body));
    f.ack(&d3, true);
    assert_eq!(f.prepare("k").mode, Mode::None);
    // The unfinished line, once complete, comes whole.
    append(&f.log, "_ms\":4,\"text\":\"e\"}\n");
    let e = f.prepare("k");
    assert_eq!(
        (e.mode, texts_in(&e.body)),
        (Mode::Delta, vec!["e".to_string()])
    );
    // Other keys are independent.
    assert_eq!(f.prepare("other").mode, Mode::Full);
}

#[test]
fn unknown_ids_stale_acks_and_late_failures() {
    let f = Fixture::new();
    append(&f.log, &rec(1, "a"));
    match f.store.lock().unwrap().ack("nope", true) {
        Err(Error::UnknownPrepare(id)) => assert_eq!(id, "nope"),
        other => panic!("expected UnknownPrepare, got {other:?}"),
    }
    let p1 = f.prepare("k");
    f.ack(&p1, true);
    append(&f.log, &rec(2, "b"));
    let p2 = f.prepare("k");
    let p3 = f.prepare("k");
    f.ack(&p3, true);
    // Acking an older prepare never moves the position back.
    let again = f.store.lock().unwrap().ack(&p1.prepare_id, true).unwrap();
    assert!(again.repeated);
    assert_eq!(again.position, Some(p3.to));
    // A failure reported after a success does not undo it.
    f.store.lock().unwrap().ack(&p2.prepare_id, false).unwrap();
    f.store.lock().unwrap().ack(&p3.prepare_id, false).unwrap();
    assert_eq!(f.prepare("k").mode, Mode::None);
}

#[test]
fn positions_survive_a_restart_and_reset_when_the_log_changes() {
    let f = Fixture::new();
    append(&f.log, &rec(1, "a"));
    let p = f.prepare("k");
    f.ack(&p, true);
    append(&f.log, &rec(2, "b"));
    // A new process: the store reopened from disk.
    let reopened = Fixture {
        store: Mutex::new(Store::open(Store::path_for(&f.log)).unwrap()),
        _dir: tempfile::tempdir().unwrap(),
        log: f.log.clone(),
        sel: Selection::default(),
        options: ReplayOptions::default(),
    };
    let d = reopened.prepare("k");
    assert_eq!(
        (d.mode, texts_in(&d.body)),
        (Mode::Delta, vec!["b".to_string()])
    );
    reopened.ack(&d, true);
    // Rewritten in place with other bytes of the same length or longer:
    // the bytes before the position differ, so it starts over.
    let content = std::fs::read_to_string(&f.log)
        .unwrap()
        .replace("\"a\"", "\"z\"");
    std::fs::write(&f.log, content).unwrap();
    let full = reopened.prepare("k");
    assert_eq!(
        (full.mode, texts_in(&full.body)),
        (Mode::Full, vec!["z".to_string(), "b".to_string()])
    );
    reopened.ack(&full, true);
    // Replaced by another file (rotation): full again.
    let tmp = f.log.with_extension("new");
    std::fs::write(&tmp, rec(7, "new")).unwrap();
    std::fs::rename(&tmp, &f.log).unwrap();
    let rotated = reopened.prepare("k");
    assert_eq!(
        (rotated.mode, texts_in(&rotated.body)),
        (Mode::Full, vec!["new".to_string()])
    );
    // Truncated below the position: full again.
    reopened.ack(&rotated, true);
    std::fs::write(&f.log, b"").unwrap();
    let empty = reopened.prepare("k");
    assert_eq!((empty.mode, empty.records), (Mode::Full, 0));
    assert_eq!(empty.body, b"<memory_context>\n</memory_context>\n");
}

#[test]
fn concurrent_prepares_for_one_key_all_get_the_same_delta() {
    let f = Arc::new(Fixture::new());
    append(&f.log, &rec(1, "a"));
    let p = f.prepare("k");
    f.ack(&p, true);
    for i in 0..50 {
        append(&f.log, &rec(10 + i, "n"));
    }
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let f = f.clone();
            std::thread::spawn(move || f.prepare("k"))
        })
        .collect();
    let all: Vec<Prepared> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for p in &all {
        assert_eq!((p.mode, p.from, p.records), (Mode::Delta, all[0].from, 50));
        assert_eq!(p.body, all[0].body);
    }
    let mut ids: Vec<&str> = all.iter().map(|p| p.prepare_id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8, "every prepare has its own id");
    let handles: Vec<_> = all
        .iter()
        .map(|p| {
            let f = f.clone();
            let id = p.prepare_id.clone();
            std::thread::spawn(move || f.store.lock().unwrap().ack(&id, true).unwrap())
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(f.prepare("k").mode, Mode::None);
}

#[test]
fn json_formats_and_filters_apply_to_deltas() {
    let mut f = Fixture::new();
    f.sel.session = Some("s1".into());
    append(
        &f.log,
        "{\"type\":\"text_input\",\"ts_ms\":1,\"session_id\":\"s1\",\"text\":\"mine\"}\n",
    );
    append(
        &f.log,
        "{\"type\":\"text_input\",\"ts_ms\":2,\"session_id\":\"s2\",\"text\":\"theirs\"}\n",
    );
    let p = f.prepare_as("k", Format::OpenAi);
    let v: serde_json::Value = serde_json::from_slice(&p.body).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    f.ack(&p, true);
    append(
        &f.log,
        "{\"type\":\"text_input\",\"ts_ms\":3,\"session_id\":\"s2\",\"text\":\"x\"}\n",
    );
    // Only another session's record: nothing new for this one.
    let none = f.prepare_as("k", Format::OpenAi);
    assert_eq!(none.mode, Mode::None);
    let answer: serde_json::Value = serde_json::from_slice(&none.to_json()).unwrap();
    assert_eq!(answer["mode"], "none");
    assert_eq!(answer["body"], "");
    assert_eq!(answer["prepare_id"], none.prepare_id.as_str());
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wmreplay"))
}

#[test]
fn cli_prepare_and_ack() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    append(&log, &rec(1, "a"));
    let prepare = || common::cli_json("prepare", &log, &["--session-key", "k"]);
    let p = prepare();
    assert_eq!(p["mode"], "full");
    assert!(
        p["body"]
            .as_str()
            .unwrap()
            .contains("<record kind=\"text_input\"")
    );
    let ack = |id: &str, status: &str| {
        bin()
            .args(["ack", log.to_str().unwrap(), id, "--status", status])
            .output()
            .unwrap()
    };
    let out = ack(p["prepare_id"].as_str().unwrap(), "success");
    assert!(out.status.success());
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["position"], p["to"]);
    assert_eq!(prepare()["mode"], "none");
    append(&log, &rec(2, "b"));
    let d = prepare();
    assert_eq!(d["mode"], "delta");
    // An unknown id: exit status 3, one line naming it.
    let out = ack("0123", "success");
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown prepare_id \"0123\""), "{err}");
    assert_eq!(err.lines().count(), 1);
    // The store sits next to the log.
    assert!(dir.path().join("wm.log.wmreplay.db").exists());
}

#[test]
fn cli_windows_filters_and_trimming() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    for i in 0..20 {
        append(&log, &rec(i, &"w".repeat(40)));
    }
    let run = |args: &[&str]| {
        let out = bin().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let l = log.to_str().unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&run(&["replay", l, "--tail", "3", "--format", "openai"])).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3);
    let stats = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["stats", l];
        args.extend_from_slice(extra);
        serde_json::from_slice(&run(&args)).unwrap()
    };
    let s = stats(&[
        "--max-tokens",
        "200",
        "--tokenizer",
        "bytes",
        "--trim-to",
        "0.5",
    ]);
    assert_eq!(s["window_trimmed"], true);
    let start = s["window_start"].clone();
    assert!(s["window_tokens"].as_u64().unwrap() <= 100);
    // Two more records: the start holds (the window still fits 200).
    append(&log, &rec(20, "x"));
    append(&log, &rec(21, "y"));
    let s = stats(&[
        "--max-tokens",
        "200",
        "--tokenizer",
        "bytes",
        "--trim-to",
        "0.5",
    ]);
    assert_eq!(s["window_trimmed"], false);
    assert_eq!(s["window_start"], start);
    assert_eq!(s["pending_input"]["line"], 22);
    // Usage errors exit 2 with one line.
    let out = bin()
        .args(["replay", l, "--since", "5", "--until", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin()
        .args(["replay", l, "--trim-to", "0.5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_byte_order_mark_written_after_an_empty_full_prepare_is_dropped() {
    let f = Fixture::new();
    append(&f.log, "");
    let p = f.prepare("k");
    assert_eq!((p.mode, p.to), (Mode::Full, 0));
    f.ack(&p, true);
    append(&f.log, "\u{FEFF}");
    append(&f.log, &rec(1, "after the bom"));
    let next = f.prepare("k");
    assert_eq!(
        (next.mode, texts_in(&next.body)),
        (Mode::Full, vec!["after the bom".to_string()])
    );
}

#[test]
fn a_late_ack_from_before_a_rotation_does_not_move_the_position() {
    let f = Fixture::new();
    append(&f.log, &rec(1, "old file"));
    append(&f.log, &rec(2, "old file, longer than the new one"));
    let old = f.prepare("k");
    // Rotated: a new, shorter file at the same path.
    let tmp = f.log.with_extension("new");
    std::fs::write(&tmp, rec(3, "new")).unwrap();
    std::fs::rename(&tmp, &f.log).unwrap();
    let new = f.prepare("k");
    assert_eq!(new.mode, Mode::Full);
    f.ack(&new, true);
    // The prepare made on the old file is acknowledged late.
    let acked = f.store.lock().unwrap().ack(&old.prepare_id, true).unwrap();
    assert_eq!(acked.position, Some(new.to));
    assert_eq!(f.prepare("k").mode, Mode::None);
}

/// After prepare/ack on a 10 KB log, changing a word in its first line
/// answered `none`, then `delta`: only the 4 KiB before the position were
/// checked. The whole prefix is fingerprinted now (whole up to 1 MiB), so a
/// change anywhere before the position gives `full`.
#[test]
fn a_rewrite_anywhere_before_the_position_gives_full() {
    for at in ["first", "middle", "last"] {
        let f = Fixture::new();
        let mut log = String::new();
        for i in 0..100 {
            log.push_str(&rec(
                i,
                &format!("line {i} of a ten kilobyte log, padded to be long"),
            ));
        }
        assert!(log.len() > 5_000);
        std::fs::write(&f.log, &log).unwrap();
        let p = f.prepare("k");
        assert_eq!(p.mode, Mode::Full);
        f.ack(&p, true);
        assert_eq!(f.prepare("k").mode, Mode::None);
        // The same length, one word changed.
        let word = match at {
            "first" => "line 0 ",
            "middle" => "line 50 ",
            _ => "line 99 ",
        };
        let changed = log.replacen(word, &word.to_uppercase(), 1);
        assert_eq!(changed.len(), log.len());
        std::fs::write(&f.log, &changed).unwrap();
        assert_eq!(f.prepare("k").mode, Mode::Full, "{at} word changed");
        // And with an append after the change.
        let p = f.prepare("k");
        f.ack(&p, true);
        let changed2 = changed.replacen("LINE", "line", 1);
        std::fs::write(&f.log, format!("{changed2}{}", rec(200, "new"))).unwrap();
        assert_eq!(
            f.prepare("k").mode,
            Mode::Full,
            "{at} changed back, then appended"
        );
    }
}

/// With summaries and facts, a prepare is a delta only while no summary
/// and no fact was appended; otherwise it is full, and a full body is the
/// one-shot replay's messages (the newest summary first, the facts
/// message last). Without the flags a summary is a record like another.
#[test]
fn prepare_with_summaries_and_facts_gives_full_when_memory_changes() {
    let mut f = Fixture::new();
    f.sel.summaries = true;
    f.sel.facts = true;
    let one_shot = |f: &Fixture| {
        let bytes = std::fs::read(&f.log).unwrap();
        let mut r = wmreplay::replay(&bytes, &ReplayOptions::default());
        r.select(&f.sel, None);
        r.render_messages(Format::Anthropic)
    };
    append(&f.log, &rec(1, "a"));
    append(&f.log, &rec(2, "b"));
    append(
        &f.log,
        "{\"type\":\"wm_fact\",\"ts_ms\":3,\"key\":\"user.name\",\"value\":\"Ann\"}\n",
    );
    let p = f.prepare_as("k", Format::Anthropic);
    assert_eq!(p.mode, Mode::Full);
    assert_eq!(p.body, one_shot(&f));
    assert!(String::from_utf8_lossy(&p.body).contains("WM_KIND=wm_facts"));
    f.ack(&p, true);

    // New records only: a delta of them.
    append(&f.log, &rec(4, "c"));
    let p = f.prepare_as("k", Format::Anthropic);
    assert_eq!(p.mode, Mode::Delta);
    assert_eq!(texts_in(&p.body).len(), 1);
    assert!(String::from_utf8_lossy(&p.body).contains(r#"\"text\":\"c\""#));
    f.ack(&p, true);

    // A summary covering the first two: full, the summary first.
    let second = rec(1, "a").len();
    append(
        &f.log,
        &format!(
            "{{\"type\":\"wm_summary\",\"ts_ms\":5,\"covers\":{{\"ts_ms\":2,\"offset\":{second}}},\"text\":\"SUM\"}}\n"
        ),
    );
    let p = f.prepare_as("k", Format::Anthropic);
    assert_eq!(p.mode, Mode::Full);
    let body = String::from_utf8(p.body.clone()).unwrap();
    assert_eq!(p.body, one_shot(&f));
    assert!(!body.contains(r#"\"text\":\"a\""#) && !body.contains(r#"\"text\":\"b\""#));
    assert!(body.find("SUM").unwrap() < body.find(r#"\"text\":\"c\""#).unwrap());
    f.ack(&p, true);

    // A record written after the summary, sorted into what it covers: a
    // delta still replays it.
    append(&f.log, &rec(1, "late"));
    let p = f.prepare_as("k", Format::Anthropic);
    assert_eq!(p.mode, Mode::Delta);
    assert!(String::from_utf8_lossy(&p.body).contains(r#"\"text\":\"late\""#));
    f.ack(&p, true);

    // A changed fact: full, the facts message last with the new value.
    append(
        &f.log,
        "{\"type\":\"wm_fact\",\"ts_ms\":6,\"key\":\"user.name\",\"value\":\"Bea\"}\n",
    );
    let p = f.prepare_as("k", Format::Anthropic);
    assert_eq!(p.mode, Mode::Full);
    assert_eq!(p.body, one_shot(&f));
    let body = String::from_utf8(p.body).unwrap();
    assert!(body.rfind("Bea").unwrap() > body.find(r#"\"text\":\"late\""#).unwrap());
    assert!(!body.contains("Ann"));

    // Without the flags, a summary is appended to a delta like any record.
    f.sel = Selection::default();
    let p = f.prepare_as("plain", Format::Anthropic);
    f.ack(&p, true);
    append(
        &f.log,
        "{\"type\":\"wm_summary\",\"ts_ms\":7,\"covers\":{\"ts_ms\":1,\"offset\":0},\"text\":\"S2\"}\n",
    );
    let p = f.prepare_as("plain", Format::Anthropic);
    assert_eq!(p.mode, Mode::Delta);
    assert!(String::from_utf8_lossy(&p.body).contains("WM_KIND=wm_summary"));
}

#[test]
fn cli_prepare_refuses_facts_in_xml_and_takes_them_in_messages() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wm.log");
    append(&log, &rec(1, "a"));
    append(
        &log,
        "{\"type\":\"wm_fact\",\"ts_ms\":2,\"key\":\"k\",\"value\":1}\n",
    );
    let out = bin()
        .args([
            "prepare",
            log.to_str().unwrap(),
            "--session-key",
            "k",
            "--facts",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--facts has no place in the XML document"),
        "{err}"
    );
    let out = bin()
        .args(["prepare", log.to_str().unwrap(), "--session-key", "k"])
        .args(["--facts", "--summaries", "--format", "openai"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "full");
    assert!(v["body"].as_str().unwrap().contains("WM_KIND=wm_facts"));
}
