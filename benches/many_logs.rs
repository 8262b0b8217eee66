//! A memory server for many agents: `wmreplay serve --log-dir` over
//! thousands of logs, most idle, some touched now and then, a few hot —
//! what a cold log's first turn costs, what a hot log's turn costs beside
//! them, and the file descriptors, threads and memory the server holds.
//!
//! ```sh
//! cargo build --profile bench
//! cargo bench --bench many_logs                                 # 10000x1MiB, 1000 touched, 50 hot, 60 s
//! cargo bench --bench many_logs -- --logs 2000x1MiB --secs 20
//! cargo bench --bench many_logs -- --serve-args "--idle-timeout 1m"
//! cargo bench --bench many_logs -- --via anthropic-sdk      # keyed turns: each log opens its store
//! cargo bench --bench many_logs -- --jetstream nats://127.0.0.1:4222
//! cargo bench --bench many_logs -- --jetstream nats://127.0.0.1:4222 --fresh-replica
//! ```
//!
//! It:
//! 1. copies the seed-1 corpus of SIZE into N logs `log0.log`… of a scratch
//!    directory, and starts an instant mock model and `wmreplay serve
//!    --log-dir` (release binary, fsync on, a 100k-token window) over them.
//!    Under `--jetstream` the stream is each log's home: the corpus is
//!    written into each log through `POST /v1/logs/{id}/records` instead
//!    (in parts of at most 256 KiB, `--clients` at once; the stream must be
//!    empty: a fresh `nats-server -js -sd DIR`), which leaves each log's
//!    local cache written. With `--fresh-replica` the server is then
//!    stopped and another started over an empty directory: every log's
//!    first turn builds its cache from the stream (a replica that never
//!    served it, as after a failover);
//! 2. **cold**: `--cold` logs never asked for before get one `/respond`
//!    turn each, one after another, each followed by the same request sent
//!    straight to the mock (the direct call): a cold log's first turn;
//! 3. **warm**: a turn on each of the `--touched` logs, `--clients` at once
//!    (each its log's first: the minute before the one measured);
//! 4. **mix**: `--clients` keep-alive clients for `--secs`, each turn on a
//!    hot log (one of `--hot`) or, every other turn, on one of the
//!    `--touched` logs drawn at random; every 100 ms the server's open file
//!    descriptors, threads and resident memory are read from /proc;
//! 5. **hot**: `--turns` sequential turns on the hot logs, each followed by
//!    a direct call: a hot log's overhead with the others open or closed
//!    around it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[path = "common/turn_bodies.rs"]
mod bodies;
#[path = "common/mod.rs"]
mod common;
#[path = "common/serve.rs"]
mod serve;

use serve::{Server, client, mock, ms, pct, post, proc_status, wait_healthy};

struct Opts {
    logs: usize,
    size: String,
    touched: usize,
    hot: usize,
    cold: usize,
    secs: f64,
    clients: usize,
    turns: usize,
    bin: PathBuf,
    fsync: bool,
    serve_args: Vec<String>,
    /// The turns' route and body (the turns bench's `--via`).
    via: String,
    /// Logs kept in JetStream (`--jetstream URL`): seeded through the
    /// write API rather than copied.
    jetstream: bool,
    /// After seeding, a second server over an empty directory.
    fresh_replica: bool,
}

fn opts() -> Opts {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut o = Opts {
        logs: 10_000,
        size: "1MiB".into(),
        touched: 1_000,
        hot: 50,
        cold: 100,
        secs: 60.0,
        clients: 8,
        turns: 200,
        bin: root.join("target/release/wmreplay"),
        fsync: true,
        serve_args: Vec::new(),
        via: "respond".into(),
        jetstream: false,
        fresh_replica: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = || args.get(i + 1).cloned().unwrap_or_default();
        let number = |what: &str| -> usize {
            value()
                .parse()
                .unwrap_or_else(|_| panic!("{what} takes a number"))
        };
        match args[i].as_str() {
            "--logs" => {
                let v = value();
                let (n, size) = v.split_once('x').expect("--logs NxSIZE, e.g. 10000x1MiB");
                o.logs = n.parse().expect("a count of logs");
                o.size = size.to_string();
            }
            "--touched" => o.touched = number("--touched"),
            "--hot" => o.hot = number("--hot"),
            "--cold" => o.cold = number("--cold"),
            "--clients" => o.clients = number("--clients"),
            "--turns" => o.turns = number("--turns"),
            "--secs" => o.secs = value().parse().expect("--secs S"),
            "--bin" => o.bin = PathBuf::from(value()),
            "--via" => o.via = value(),
            "--serve-args" => o
                .serve_args
                .extend(value().split_whitespace().map(str::to_string)),
            "--jetstream" => {
                o.jetstream = true;
                o.serve_args.extend(["--jetstream".to_string(), value()]);
            }
            "--fresh-replica" => {
                o.fresh_replica = true;
                i += 1;
                continue;
            }
            "--no-fsync" => {
                o.fsync = false;
                i += 1;
                continue;
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
        o.hot <= o.touched && o.touched + o.cold <= o.logs,
        "--hot ≤ --touched, and --touched + --cold ≤ the logs"
    );
    assert!(
        o.jetstream || !o.fresh_replica,
        "--fresh-replica is for --jetstream"
    );
    assert!(
        o.bin.exists(),
        "{} is missing: cargo build --profile bench first",
        o.bin.display()
    );
    o
}

/// What /proc says of the server: open descriptors, threads, RSS (MB).
fn sample(pid: u32) -> (u64, u64, f64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    (
        fds,
        proc_status(pid, "Threads:") as u64,
        proc_status(pid, "VmRSS:") / 1024.0,
    )
}

/// The highest of each figure /proc gives while `stop` is unset.
fn sampler(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, u64, f64)> {
    std::thread::spawn(move || {
        let mut most = (0, 0, 0.0f64);
        while !stop.load(Ordering::Relaxed) {
            let (f, t, r) = sample(pid);
            most = (most.0.max(f), most.1.max(t), most.2.max(r));
            std::thread::sleep(Duration::from_millis(100));
        }
        most
    })
}

fn main() {
    let o = opts();
    wmreplay::server::install_crypto_provider();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (source, _) = common::corpus(&o.size);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data/many");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    if !o.jetstream {
        let t = Instant::now();
        for i in 0..o.logs {
            std::fs::copy(&source, dir.join(format!("log{i}.log"))).unwrap();
        }
        eprintln!(
            "{} logs of {} copied in {:.1} s",
            o.logs,
            o.size,
            t.elapsed().as_secs_f64()
        );
        // The copies written back before anything is timed.
        let _ = std::process::Command::new("sync").status();
    }
    rt.block_on(run(&o, &dir, &source));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The corpus's records in NDJSON parts of at most 256 KiB, cut at line
/// ends (each part one message of the stream, under NATS's default 1 MiB
/// payload). The corpus holds lines the replay skips (it is adversarial),
/// which the write API refuses: lines that are not a JSON object with a
/// string `type` are left out here, and any other the server refuses is
/// left out as it names it ([`seed`]).
fn parts(source: &std::path::Path) -> Vec<Vec<Vec<u8>>> {
    const PART: usize = 256 << 10;
    let all = std::fs::read(source).unwrap();
    let (mut out, mut part, mut len) = (Vec::new(), Vec::new(), 0);
    for line in all.split(|&b| b == b'\n') {
        let ok = serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|v| {
            v.get("type").is_some_and(|t| t.is_string())
                && v.get("ts_ms").is_none_or(|t| t.is_number())
        });
        if !ok {
            continue;
        }
        if len + line.len() + 1 > PART && !part.is_empty() {
            out.push(std::mem::take(&mut part));
            len = 0;
        }
        len += line.len() + 1;
        part.push(line.to_vec());
    }
    if !part.is_empty() {
        out.push(part);
    }
    out
}

/// Posts `lines` as NDJSON to `url`: `Err(index)` for the record the
/// server refused (nothing of the batch is written then).
async fn post_records(client: &reqwest::Client, url: &str, lines: &[Vec<u8>]) -> Result<(), usize> {
    let body = lines.join(&b'\n');
    let r = client
        .post(url)
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    if status.is_success() {
        return Ok(());
    }
    let text = r.text().await.unwrap_or_default();
    let refused = text
        .split_once("record ")
        .and_then(|(_, rest)| rest.split(':').next()?.parse().ok());
    match (status.as_u16(), refused) {
        (400, Some(i)) => Err(i),
        _ => panic!("seeding {url}: {status} {text}"),
    }
}

/// Runs `each(client, i)` for every `i` of `range`, `clients` tasks at once
/// taking the next index as each finishes (every task has its own client).
async fn spread<F, Fut>(clients: usize, range: std::ops::Range<usize>, sdk: bool, each: F)
where
    F: Fn(reqwest::Client, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicU64::new(range.start as u64));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (next, end, each) = (next.clone(), range.end, each.clone());
        tasks.push(tokio::spawn(async move {
            let client = client(sdk);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= end {
                    return;
                }
                each(client.clone(), i).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// Writes the corpus into every log through the write API, `clients` at
/// once: under `--jetstream`, where the stream is each log's home. The
/// first log is written alone, leaving out what the server refuses.
async fn seed(o: &Opts, server: &Server, source: &std::path::Path) {
    let mut parts = parts(source);
    let t = Instant::now();
    let url = |i: usize| server.url(&format!("/v1/logs/log{i}/records"));
    let (first, mut refused) = (client(false), 0);
    for part in parts.iter_mut() {
        while let Err(i) = post_records(&first, &url(0), part).await {
            part.remove(i);
            refused += 1;
        }
    }
    let parts = Arc::new(parts);
    let (each_parts, urls) = (
        parts.clone(),
        Arc::new((0..o.logs).map(url).collect::<Vec<_>>()),
    );
    spread(o.clients, 1..o.logs, false, move |client, i| {
        let (parts, urls) = (each_parts.clone(), urls.clone());
        async move {
            for part in parts.iter() {
                let r = post_records(&client, &urls[i], part).await;
                assert!(r.is_ok(), "log{i}: a record log0 took was refused");
            }
            if i.is_multiple_of(1_000) {
                eprintln!("  {i} logs written, {:.0} s", t.elapsed().as_secs_f64());
            }
        }
    })
    .await;
    let secs = t.elapsed().as_secs_f64();
    let each: usize = parts.iter().flatten().map(|l| l.len() + 1).sum();
    eprintln!(
        "{} logs of {} written through the write API in {secs:.1} s ({} parts, {} records, {} KiB each; {refused} more lines refused), {:.0} MB/s",
        o.logs,
        o.size,
        parts.len(),
        parts.iter().map(Vec::len).sum::<usize>(),
        each >> 10,
        (each * o.logs) as f64 / secs / 1e6
    );
}

async fn run(o: &Opts, dir: &std::path::Path, source: &std::path::Path) {
    let (mock_port, mock_task) = mock().await;
    let mut args = vec!["--log-dir".to_string(), dir.display().to_string()];
    args.extend(
        ["--max-tokens-window", "100000", "--start-on", "text_input"]
            .iter()
            .map(|a| a.to_string()),
    );
    args.extend(o.serve_args.iter().cloned());
    let mut server = Server::start(&o.bin, &args, mock_port, o.fsync);
    let plain = client(false);
    wait_healthy(&plain, &server).await;
    if o.jetstream {
        seed(o, &server, source).await;
        if o.fresh_replica {
            drop(server);
            std::fs::remove_dir_all(dir).unwrap();
            std::fs::create_dir_all(dir).unwrap();
            let _ = std::process::Command::new("sync").status();
            server = Server::start(&o.bin, &args, mock_port, o.fsync);
            wait_healthy(&plain, &server).await;
            eprintln!("a fresh replica over an empty directory");
        }
    }
    let (fds0, threads0, rss0) = sample(server.pid());
    let route = bodies::route(&o.via);
    let url = |i: usize| server.url(&format!("/v1/logs/log{i}/{route}"));
    let via = o.via.as_str();
    let mock_url = format!("http://127.0.0.1:{mock_port}/v1/messages");
    // The direct call: the request a turn on any of these (equal) logs
    // sends, read from the last cold log, which no turn touches.
    let r = plain
        .post(server.url(&format!("/v1/logs/log{}/context", o.logs - 1)))
        .body(r#"{"text":"turn 0"}"#)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "context: {}", r.status());
    let direct = bodies::direct(via, &r.bytes().await.unwrap());
    let sdk = bodies::sdk(via);

    // Cold logs' first turns: logs past the touched ones.
    let turn_client = client(sdk);
    let (mut cold, mut cold_direct) = (Vec::new(), Vec::new());
    for k in 0..o.cold {
        let i = o.touched + k;
        cold.push(ms(post(&turn_client, &url(i), &bodies::turn(via, k)).await));
        cold_direct.push(ms(post(&plain, &mock_url, &direct).await));
    }
    cold.sort_by(f64::total_cmp);
    cold_direct.sort_by(f64::total_cmp);

    // Every touched log's first turn, with /proc read from now on.
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampling = sampler(server.pid(), stop_sampling.clone());
    let t = Instant::now();
    let urls = Arc::new((0..o.touched).map(url).collect::<Vec<_>>());
    let via_owned = o.via.clone();
    spread(o.clients, 0..o.touched, sdk, move |client, i| {
        let (urls, via) = (urls.clone(), via_owned.clone());
        async move {
            post(&client, &urls[i], &bodies::turn(&via, 20_000 + i)).await;
        }
    })
    .await;
    let warm_secs = t.elapsed().as_secs_f64();
    let (fds_warm, _, rss_warm) = sample(server.pid());

    // The mix.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let urls: Arc<Vec<String>> = Arc::new((0..o.touched).map(url).collect());
    let mut tasks = Vec::new();
    for c in 0..o.clients {
        let (stop, done, urls) = (stop.clone(), done.clone(), urls.clone());
        let (hot, touched, via) = (o.hot, o.touched, o.via.clone());
        tasks.push(tokio::spawn(async move {
            let client = client(sdk);
            let (mut hot_ms, mut other_ms) = (Vec::new(), Vec::new());
            let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ c as u64;
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let on_hot = n.is_multiple_of(2);
                let i = if on_hot {
                    (seed % hot as u64) as usize
                } else {
                    (seed % touched as u64) as usize
                };
                let body = bodies::turn(&via, 100_000 + c * 1_000_000 + n);
                let took = ms(post(&client, &urls[i], &body).await);
                if on_hot { &mut hot_ms } else { &mut other_ms }.push(took);
                done.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            (hot_ms, other_ms)
        }));
    }
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(o.secs)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut hot_mix, mut other_mix) = (Vec::new(), Vec::new());
    for t in tasks {
        let (h, other) = t.await.unwrap();
        hot_mix.extend(h);
        other_mix.extend(other);
    }
    let per_sec = done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64();
    hot_mix.sort_by(f64::total_cmp);
    other_mix.sort_by(f64::total_cmp);

    // Sequential turns on the hot logs against direct calls.
    let (mut turns, mut direct_ms) = (Vec::new(), Vec::new());
    for k in 0..o.turns {
        let body = bodies::turn(via, 50_000 + k);
        turns.push(ms(post(&turn_client, &url(k % o.hot), &body).await));
        direct_ms.push(ms(post(&plain, &mock_url, &direct).await));
    }
    turns.sort_by(f64::total_cmp);
    direct_ms.sort_by(f64::total_cmp);
    stop_sampling.store(true, Ordering::Relaxed);
    let (fds, threads, rss) = sampling.join().unwrap();
    let (_, hwm) = server.memory();

    println!(
        "binary {} · via {} · {} logs × {} · {} touched, {} hot · {} clients × {} s · fsync {} · serve {}{}",
        o.bin.display(),
        o.via,
        o.logs,
        o.size,
        o.touched,
        o.hot,
        o.clients,
        o.secs,
        if o.fsync { "on" } else { "off" },
        o.serve_args.join(" "),
        if o.fresh_replica {
            " · a fresh replica"
        } else {
            ""
        }
    );
    println!(
        "{}: {fds0} fds, {threads0} threads, {rss0:.0} MB · {} touched logs' first turns in {warm_secs:.1} s, then {fds_warm} fds, {rss_warm:.0} MB · most from then on: {fds} fds, {threads} threads, {rss:.0} MB (peak RSS {hwm:.0} MB)",
        if o.jetstream && !o.fresh_replica {
            "after writing the logs"
        } else {
            "at start"
        },
        o.touched
    );
    println!(
        "| cold first turn p50 / p99 | its overhead p50 | mix turns/s | mix p50 / p99, hot | mix p50 / p99, touched | hot turn overhead p50 |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {:.2} / {:.2} ms | {:+.2} ms | {per_sec:.0} | {:.2} / {:.2} ms | {:.2} / {:.2} ms | **{:+.2} ms** |",
        pct(&cold, 0.5),
        pct(&cold, 0.99),
        pct(&cold, 0.5) - pct(&cold_direct, 0.5),
        pct(&hot_mix, 0.5),
        pct(&hot_mix, 0.99),
        pct(&other_mix, 0.5),
        pct(&other_mix, 0.99),
        pct(&turns, 0.5) - pct(&direct_ms, 0.5),
    );
    drop(server);
    mock_task.abort();
}
