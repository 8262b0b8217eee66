//! `wmreplay serve` as a child process, for the tests that need a real
//! process: signals, stderr, resource limits.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

pub fn wmreplay() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wmreplay"))
}

/// A resource limit for the server process (soft and hard).
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// RLIMIT_FSIZE, in bytes.
    FileSize(u64),
    /// RLIMIT_NOFILE.
    OpenFiles(u64),
}

/// Open file descriptors of process `pid`.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// A number from `/proc/PID/status` (`VmRSS`, `VmHWM` in kB, `Threads`);
/// 0 when the process is gone.
pub fn proc_status(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .filter_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .find_map(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Peak resident memory of process `pid` so far, in bytes (VmHWM).
pub fn peak_rss(pid: u32) -> u64 {
    proc_status(pid, "VmHWM") * 1024
}

/// A server process and what it printed on stderr so far.
pub struct Serving {
    pub child: Child,
    pub url: String,
    stderr: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Serving {
    /// Starts `serve` on an ephemeral port and waits for its `listening`
    /// line. `limit`: a file size limit (RLIMIT_FSIZE) for the process.
    pub fn start(log: &Path, args: &[&str], envs: &[(&str, &str)], limit: Option<u64>) -> Serving {
        let mut all = vec!["--log".to_string(), log.display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        Serving::launch(&all, envs, limit)
    }

    /// Starts `serve` with exactly `args` (besides `--addr`).
    pub fn launch(args: &[String], envs: &[(&str, &str)], limit: Option<u64>) -> Serving {
        Serving::launch_limited(args, envs, limit.map(Limit::FileSize))
    }

    /// Starts `serve` with exactly `args` (besides `--addr`), under `limit`.
    pub fn launch_limited(args: &[String], envs: &[(&str, &str)], limit: Option<Limit>) -> Serving {
        let mut cmd = wmreplay();
        cmd.arg("serve")
            .args(["--addr", "localhost:0"])
            .args(args)
            .env_remove("RUST_LOG")
            // There is no built-in model: an upstream needs one.
            .env("WMREPLAY_MODEL", "test-model")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        if let Some(limit) = limit {
            use std::os::unix::process::CommandExt;
            let (resource, value) = match limit {
                Limit::FileSize(b) => (libc::RLIMIT_FSIZE, b),
                Limit::OpenFiles(n) => (libc::RLIMIT_NOFILE, n),
            };
            // SAFETY: only setrlimit, which is async-signal-safe, runs
            // between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    let l = libc::rlimit {
                        rlim_cur: value,
                        rlim_max: value,
                    };
                    if libc::setrlimit(resource, &l) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let keep = seen.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stderr);
            let mut line = Vec::new();
            let mut sent = false;
            while r.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
                keep.lock().unwrap().extend_from_slice(&line);
                let text = String::from_utf8_lossy(&line).to_string();
                if !sent && text.contains("listening") {
                    let _ = tx.send(text);
                    sent = true;
                }
                line.clear();
            }
            let mut rest = Vec::new();
            let _ = r.read_to_end(&mut rest);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the server says where it listens");
        let addr = line
            .split(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '=')
            .find(|w| w.starts_with("127.0.0.1:") || w.starts_with("[::1]:"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        Serving {
            child,
            url: format!("http://{addr}"),
            stderr: seen,
        }
    }

    /// What the process printed on stderr so far, and whether it has
    /// exited (and how).
    #[allow(dead_code)]
    pub fn stderr(&mut self) -> String {
        let exited = match self.child.try_wait() {
            Ok(Some(status)) => format!("(exited: {status})\n"),
            _ => String::new(),
        };
        exited + &String::from_utf8_lossy(&self.stderr.lock().unwrap())
    }

    pub fn stop(mut self) -> String {
        self.stop_in_place()
    }

    fn stop_in_place(&mut self) -> String {
        // SAFETY: kill sends a signal to our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
        std::thread::sleep(Duration::from_millis(50));
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).to_string()
    }
}

/// Sends a streaming /respond and never reads the answer (with a small
/// receive buffer, so the server's writes stall soon).
pub async fn non_reading_stream(addr: std::net::SocketAddr, text: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    let body = json!({"text": text, "stream": true}).to_string();
    let req = format!(
        "POST /respond HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    s
}

impl Drop for Serving {
    /// A test that failed leaves no server running.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
