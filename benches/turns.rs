//! What a turn costs through `wmreplay serve`, against the same request sent
//! straight to the model: the server's own overhead per turn, on logs of
//! several sizes, one client after another and eight at once.
//!
//! ```sh
//! cargo build --profile bench
//! cargo bench --bench turns                                  # 1MiB,1GiB, both selections
//! cargo bench --bench turns -- --sizes 100MiB --select window --turns 400
//! cargo bench --bench turns -- --log-dir 100x10MiB           # 100 logs of 10 MiB
//! cargo bench --bench turns -- --bin /path/to/older/wmreplay # another build, same harness
//! cargo bench --bench turns -- --sizes 1MiB --via respond,anthropic,anthropic-sdk
//! ```
//!
//! `--via` picks the route a turn takes: `respond` (`POST /respond`),
//! `anthropic` (the provider-compatible `POST /anthropic/v1/messages`, a
//! plain request), `anthropic-sdk` (the same with the header an official
//! SDK sends, `x-stainless-retry-count`, which keys the turn so that the
//! SDK's retries cannot run it twice), `anthropic-history` (the plain
//! request with a resent history of 20 messages the log lacks, new each
//! turn: what finding what the log holds costs, against `anthropic`),
//! `respond-stream` and `anthropic-stream` (those streamed: the mock sends
//! its events one chunk each), `claude-code` (a request shaped as Claude
//! Code's: 69 KB, 3 system blocks, 24 tools, streamed, keyed by the SDK's
//! header; its direct call carries the same system and tools).
//!
//! For each log and selection it:
//! 1. copies the seed-1 corpus of that size (generated once into
//!    `target/bench-data/`) to a scratch file;
//! 2. starts an instant mock model in this process (Anthropic Messages,
//!    HTTP/1.1 keep-alive, Nagle off) and `wmreplay serve` (the release
//!    binary, fsync on) in front of it;
//! 3. takes the request a turn sends from `POST /v1/context` (the body
//!    posted straight to the mock, the "direct call"), then waits until the
//!    server's CPU is idle (on a loopback address the inspector page's index
//!    of the log is parsed after the first replay: under a second on 1 GiB);
//! 4. runs `--turns` sequential `/respond` turns, each followed by one
//!    direct call from the same client: overhead = p50(turn) − p50(direct);
//! 5. runs rounds of `--clients` keep-alive clients for `--secs` through
//!    the server, then straight to the mock, interleaved: requests/s each,
//!    and their ratio (median of the rounds);
//! 6. reads the server's resident memory (VmRSS, VmHWM) from /proc.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "common/turn_bodies.rs"]
mod bodies;
#[path = "common/mod.rs"]
mod common;
#[path = "common/serve.rs"]
mod serve;

use serve::{Server, client, median, mock, ms, pct, post, wait_healthy, wait_idle};

struct Opts {
    sizes: Vec<String>,
    selects: Vec<String>,
    turns: usize,
    clients: usize,
    secs: f64,
    rounds: usize,
    bin: PathBuf,
    log_dir: Option<(usize, String)>,
    fsync: bool,
    via: Vec<String>,
}

fn opts() -> Opts {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut o = Opts {
        sizes: vec!["1MiB".into(), "1GiB".into()],
        selects: vec!["window".into(), "tail".into()],
        turns: 200,
        clients: 8,
        secs: 5.0,
        rounds: 3,
        bin: root.join("target/release/wmreplay"),
        log_dir: None,
        fsync: true,
        via: vec!["respond".into()],
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = || args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--sizes" => o.sizes = value().split(',').map(str::to_string).collect(),
            "--select" => {
                o.selects = match value().as_str() {
                    "both" => vec!["window".into(), "tail".into()],
                    v => v.split(',').map(str::to_string).collect(),
                }
            }
            "--turns" => o.turns = value().parse().expect("--turns N"),
            "--clients" => o.clients = value().parse().expect("--clients N"),
            "--secs" => o.secs = value().parse().expect("--secs S"),
            "--rounds" => o.rounds = value().parse().expect("--rounds N"),
            "--bin" => o.bin = PathBuf::from(value()),
            "--via" => o.via = value().split(',').map(str::to_string).collect(),
            "--no-fsync" => {
                o.fsync = false;
                i += 1;
                continue;
            }
            "--log-dir" => {
                let v = value();
                let (n, size) = v.split_once('x').expect("--log-dir NxSIZE, e.g. 100x10MiB");
                o.log_dir = Some((n.parse().expect("a count"), size.to_string()));
            }
            // cargo bench passes --bench.
            "--bench" => {
                i += 1;
                continue;
            }
            other => panic!("unknown argument {other}; see the file's header"),
        }
        i += 2;
    }
    assert!(
        o.bin.exists(),
        "{} is missing: cargo build --profile bench first",
        o.bin.display()
    );
    o
}

fn selection_flags(select: &str) -> Vec<&'static str> {
    match select {
        "window" => vec!["--max-tokens-window", "100000", "--start-on", "text_input"],
        "tail" => vec!["--tail", "200"],
        "all" => vec![],
        other => panic!("--select window|tail|all, not {other}"),
    }
}

/// Requests per second of `clients` keep-alive clients posting for `secs`,
/// and the median latency (ms).
async fn throughput(
    clients: usize,
    secs: f64,
    urls: Arc<Vec<String>>,
    bodies: Arc<Vec<bytes::Bytes>>,
    sdk: bool,
) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (stop, done, urls, bodies) = (stop.clone(), done.clone(), urls.clone(), bodies.clone());
        tasks.push(tokio::spawn(async move {
            let client = client(sdk);
            let mut i = c;
            let mut took = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                took.push(ms(post(
                    &client,
                    &urls[i % urls.len()],
                    &bodies[i % bodies.len()],
                )
                .await));
                done.fetch_add(1, Ordering::Relaxed);
                i += clients;
            }
            took
        }));
    }
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let elapsed = t.elapsed().as_secs_f64();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort_by(f64::total_cmp);
    (n as f64 / elapsed, pct(&all, 0.5))
}

/// One server over `logs` (ids under a directory, or the one log), with
/// `select`: the figures.
async fn run_one(
    o: &Opts,
    label: &str,
    where_: Vec<String>,
    ids: Vec<Option<String>>,
    select: &str,
    via: &str,
) {
    let sdk = bodies::sdk(via);
    let (mock_port, mock_task) = mock().await;
    let mut args = where_.clone();
    args.extend(selection_flags(select).iter().map(|a| a.to_string()));
    let server = Server::start(&o.bin, &args, mock_port, o.fsync);
    let client = client(false);
    wait_healthy(&client, &server).await;
    // One log: /respond and /v1/context; under --log-dir,
    // /v1/logs/{id}/respond and /v1/logs/{id}/context.
    let path = |id: &Option<String>, route: &str| match id {
        Some(id) => format!("/v1/logs/{id}/{route}"),
        None if route == "context" => "/v1/context".to_string(),
        None => format!("/{route}"),
    };
    let turn_route = bodies::route(via);
    // The first context of each log builds its live state.
    let t = Instant::now();
    let mut direct_bodies = Vec::new();
    for id in &ids {
        let r = client
            .post(server.url(&path(id, "context")))
            .body(r#"{"text":"turn 0"}"#)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "context: {}", r.status());
        direct_bodies.push(bodies::direct(via, &r.bytes().await.unwrap()));
    }
    let first_context = t.elapsed();
    // What the start left running in the background ends before the turns.
    wait_idle(&server).await;
    let body_kb = direct_bodies[0].len() as f64 / 1024.0;
    let mock_url = format!("http://127.0.0.1:{mock_port}/v1/messages");
    let respond_urls: Vec<String> = ids
        .iter()
        .map(|id| server.url(&path(id, turn_route)))
        .collect();
    let turn_client = self::client(sdk);
    // Warm-up turns (a log's first turn opens its writer and journal),
    // then the measured ones, each with a direct call.
    let turn_body = |i: usize| bodies::turn(via, i);
    for i in 0..20.max(respond_urls.len()) {
        post(
            &turn_client,
            &respond_urls[i % respond_urls.len()],
            &turn_body(i),
        )
        .await;
        post(&client, &mock_url, &direct_bodies[i % direct_bodies.len()]).await;
    }
    let (mut turns, mut direct) = (Vec::new(), Vec::new());
    for i in 0..o.turns {
        turns.push(ms(post(
            &turn_client,
            &respond_urls[i % respond_urls.len()],
            // Not the warm-up's: each a new conversation.
            &turn_body(i + 10_000),
        )
        .await));
        direct.push(ms(post(
            &client,
            &mock_url,
            &direct_bodies[i % direct_bodies.len()],
        )
        .await));
    }
    turns.sort_by(f64::total_cmp);
    direct.sort_by(f64::total_cmp);
    // Eight (--clients) at once, interleaved rounds.
    let turn_bodies: Arc<Vec<bytes::Bytes>> = Arc::new((0..64).map(turn_body).collect());
    let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut lag = Vec::new();
    for _ in 0..o.rounds {
        let (a, a50) = throughput(
            o.clients,
            o.secs,
            Arc::new(respond_urls.clone()),
            turn_bodies.clone(),
            sdk,
        )
        .await;
        let (b, b50) = throughput(
            o.clients,
            o.secs,
            Arc::new(vec![mock_url.clone()]),
            Arc::new(direct_bodies.clone()),
            false,
        )
        .await;
        ours.push(a);
        theirs.push(b);
        ratios.push(a / b);
        lag.push(a50 - b50);
    }
    let (rss, hwm) = server.memory();
    let overhead = pct(&turns, 0.5) - pct(&direct, 0.5);
    println!(
        "| {label} | {select} | {via} | {body_kb:.0} KB | {:.2} s | {:.2} / {:.2} / {:.2} ms | {:.2} ms | **{overhead:+.2} ms** | {:+.2} ms | {:.0} | {:.0} | **{:.2}×** | {rss:.0} MB | {hwm:.0} MB |",
        first_context.as_secs_f64(),
        pct(&turns, 0.5),
        pct(&turns, 0.9),
        pct(&turns, 0.99),
        pct(&direct, 0.5),
        median(lag),
        median(ours),
        median(theirs),
        median(ratios),
    );
    drop(server);
    mock_task.abort();
}

fn main() {
    let o = opts();
    wmreplay::server::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "binary {} · {} turns · {} clients × {} s × {} rounds · fsync {}",
        o.bin.display(),
        o.turns,
        o.clients,
        o.secs,
        o.rounds,
        if o.fsync { "on" } else { "off" }
    );
    println!(
        "| log | selection | route | request | first context | turn p50 / p90 / p99 | direct p50 | overhead p50 | overhead p50 ({0} clients) | turns/s ({0} clients) | direct/s | ratio | RSS after | RSS peak |",
        o.clients
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let scratch = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data/turns");
    std::fs::create_dir_all(&scratch).unwrap();
    if let Some((n, size)) = &o.log_dir {
        let (source, _) = common::corpus(size);
        let dir = scratch.join("dir");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ids: Vec<Option<String>> = (0..*n).map(|i| Some(format!("log{i}"))).collect();
        for id in ids.iter().flatten() {
            std::fs::copy(&source, dir.join(format!("{id}.log"))).unwrap();
        }
        for select in &o.selects {
            for id in ids.iter().flatten() {
                std::fs::copy(&source, dir.join(format!("{id}.log"))).unwrap();
            }
            let where_ = vec!["--log-dir".to_string(), dir.display().to_string()];
            for via in &o.via {
                rt.block_on(run_one(
                    &o,
                    &format!("{n} × {size}"),
                    where_.clone(),
                    ids.clone(),
                    select,
                    via,
                ));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    for size in &o.sizes {
        let (source, _) = common::corpus(size);
        for select in &o.selects {
            for via in &o.via {
                let log = scratch.join(format!("turns-{size}.log"));
                copy_fresh(&source, &log);
                let where_ = vec!["--log".to_string(), log.display().to_string()];
                rt.block_on(run_one(&o, size, where_, vec![None], select, via));
                let _ = std::fs::remove_file(&log);
                let _ = std::fs::remove_file(log.with_extension("log.wmreplay.db"));
            }
        }
    }
}

/// A fresh copy of `source`, with none of the files a server kept beside
/// an earlier one.
fn copy_fresh(source: &Path, log: &Path) {
    let dir = log.parent().unwrap();
    let stem = log.file_name().unwrap().to_string_lossy().to_string();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with(&stem) {
            let p = e.path();
            if p.is_dir() {
                let _ = std::fs::remove_dir_all(&p);
            } else {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    std::fs::copy(source, log).unwrap();
}
