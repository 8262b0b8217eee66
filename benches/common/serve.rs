//! What the server benches share: an instant mock
//! model, `wmreplay serve` started in front of it, a request timed, and the
//! figures' arithmetic.

// Each bench that includes this module uses a part of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const ANSWER: &str = r#"{"id":"msg_bench","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"model":"m","stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}"#;

/// The instant mock model: answers every POST with one fixed message, or
/// a streamed request with its events, one chunk each.
pub async fn mock() -> (u16, tokio::task::JoinHandle<()>) {
    use axum::response::IntoResponse;
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/v1/messages",
        post(|body: axum::body::Bytes| async move {
            let streamed = memchr::memmem::find(&body, br#""stream":true"#).is_some();
            if !streamed {
                return ([("content-type", "application/json")], ANSWER).into_response();
            }
            let events = futures_util::stream::iter(
                crate::bodies::stream_events()
                    .into_iter()
                    .map(Ok::<_, std::convert::Infallible>),
            );
            (
                [("content-type", "text/event-stream")],
                axum::body::Body::from_stream(events),
            )
                .into_response()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        use axum::serve::ListenerExt;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).await.unwrap();
    });
    (port, task)
}

pub struct Server {
    child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `bin serve ARGS…` on a free port in front of the mock at `mock`
    /// (`--model m`, a key in the environment, fsync unless `fsync` is off).
    pub fn start(bin: &Path, args: &[String], mock: u16, fsync: bool) -> Server {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .args(args)
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args(["--upstream", &format!("http://127.0.0.1:{mock}")])
            .args(["--model", "m", "--api-key-env", "WMREPLAY_BENCH_KEY"])
            .env("WMREPLAY_BENCH_KEY", "bench-key")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null());
        if !fsync {
            cmd.arg("--no-fsync");
        }
        let child = cmd.spawn().expect("serve starts");
        Server { child, port }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// (VmRSS, VmHWM) in MB.
    pub fn memory(&self) -> (f64, f64) {
        let pid = self.child.id();
        (
            proc_status(pid, "VmRSS:") / 1024.0,
            proc_status(pid, "VmHWM:") / 1024.0,
        )
    }
}

/// A number of `/proc/PID/status` (`VmRSS:` in kB, `Threads:`); 0 when
/// the process is gone.
pub fn proc_status(pid: u32, name: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
}

pub async fn wait_healthy(client: &reqwest::Client, s: &Server) {
    for _ in 0..600 {
        if let Ok(r) = client.get(s.url("/healthz")).send().await
            && r.status().is_success()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the server did not start");
}

/// The process's CPU time (user and system) in clock ticks; 0 when gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            Some(rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

/// Waits (up to a minute) until the server has used no CPU for 300 ms: the
/// work its start leaves running in the background (on a loopback address,
/// the inspector page's index of the log, parsed after the first replay)
/// would otherwise fall on the first measured turns.
pub async fn wait_idle(s: &Server) {
    let start = Instant::now();
    let mut last = cpu_ticks(s.pid());
    let mut quiet = 0;
    while quiet < 3 && start.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = cpu_ticks(s.pid());
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
    }
}

pub async fn post(client: &reqwest::Client, url: &str, body: &bytes::Bytes) -> Duration {
    let t = Instant::now();
    let r = client
        .post(url)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(body.clone())
        .send()
        .await
        .expect("the request is answered");
    let status = r.status();
    let text = r.bytes().await.expect("the body is read");
    assert!(
        status.is_success(),
        "{url}: {status} {}",
        String::from_utf8_lossy(&text[..text.len().min(300)])
    );
    t.elapsed()
}

pub fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A keep-alive client; an SDK's (`sdk`) sends `x-stainless-retry-count`.
pub fn client(sdk: bool) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if sdk {
        headers.insert("x-stainless-retry-count", "0".parse().unwrap());
    }
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .default_headers(headers)
        .build()
        .unwrap()
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
