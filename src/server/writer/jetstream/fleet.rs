//! The fleet's connection: how to reach the stream (`--jetstream` and its
//! companions), the stream opened (or created) at start, waiting for a
//! cluster still electing its leaders, and the names a replica gives its
//! writes.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, stream};

/// How to reach the stream (`--jetstream` and its companions).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct JetStreamConfig {
    /// The NATS server(s), `nats://HOST:PORT` (comma-separated for several).
    pub url: String,
    /// The stream's name. Default `WMREPLAY`.
    pub stream: String,
    /// Log `{id}` is the subject `{prefix}.{id}`. Default `wmreplay.logs`.
    pub subject_prefix: String,
    /// Copies of the stream JetStream keeps (when it creates it). Default 1.
    pub replicas: usize,
    /// How long a write may wait for the stream (reconnects, a leader
    /// election) before it is answered 503. Default 10 s.
    pub timeout: Duration,
    /// How long a starting server waits for the stream (a cluster still
    /// electing its leaders after a restart), retrying and saying so, before
    /// it gives up. Default 2 minutes.
    pub start_timeout: Duration,
}

impl JetStreamConfig {
    /// The stream at `url`, the other settings by default.
    pub fn new(url: impl Into<String>) -> JetStreamConfig {
        JetStreamConfig {
            url: url.into(),
            stream: "WMREPLAY".into(),
            subject_prefix: "wmreplay.logs".into(),
            replicas: 1,
            timeout: Duration::from_secs(10),
            start_timeout: Duration::from_secs(120),
        }
    }
}

/// The stream could not be reached, or did not answer in time: a write is
/// answered 503 with `retry-after`, and nothing is acknowledged.
#[derive(Debug, thiserror::Error)]
#[error("the log's stream is unavailable: {0}")]
pub(crate) struct Unavailable(pub(crate) String);

impl Unavailable {
    pub(crate) fn of(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|i| i.is::<Unavailable>())
    }
}

pub(super) fn unavailable(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(Unavailable(e.to_string()))
}

/// The server's connection to the stream, shared by every log.
pub(crate) struct Fleet {
    pub(super) client: async_nats::Client,
    pub(super) stream: stream::Stream,
    pub(super) js: jetstream::Context,
    prefix: String,
    pub(super) timeout: Duration,
    pub(super) max_payload: usize,
    /// This process's name in message ids (unique per start).
    replica: String,
    next_id: AtomicU64,
    /// Publishes that met another replica's write first.
    pub(crate) conflicts: AtomicU64,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl Fleet {
    /// Connects and finds the stream, creating it (subjects `PREFIX.>`,
    /// file storage, `replicas` copies, a one-hour duplicate window) when
    /// there is none.
    pub(crate) async fn connect(cfg: &JetStreamConfig) -> Result<Arc<Fleet>, String> {
        let servers: Vec<async_nats::ServerAddr> = cfg
            .url
            .split(',')
            .map(|u| {
                u.trim()
                    .parse()
                    .map_err(|e| format!("--jetstream {u:?} is not a NATS URL: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Some(cfg.timeout.min(Duration::from_secs(5))))
            .retry_on_initial_connect()
            .connect(servers)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", cfg.url))?;
        let js = jetstream::new(client.clone());
        let config = stream::Config {
            name: cfg.stream.clone(),
            subjects: vec![format!("{}.>", cfg.subject_prefix)],
            storage: stream::StorageType::File,
            num_replicas: cfg.replicas,
            duplicate_window: Duration::from_secs(3600),
            allow_direct: true,
            ..Default::default()
        };
        let began = tokio::time::Instant::now();
        let deadline = began + cfg.start_timeout.max(cfg.timeout);
        let mut pause = Duration::from_millis(250);
        let stream = loop {
            match js.get_or_create_stream(config.clone()).await {
                Ok(s) => break s,
                // A cluster still electing its leaders (just restarted):
                // wait for it, saying so, up to the start timeout.
                Err(e) if tokio::time::Instant::now() + pause < deadline => {
                    tracing::warn!(
                        error = %e,
                        waited_ms = began.elapsed().as_millis() as u64,
                        retry_in_ms = pause.as_millis() as u64,
                        "the stream is not ready yet; waiting for it (--jetstream-start-timeout)"
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    return Err(format!(
                        "cannot open the stream {} (waited {} s): {e}",
                        cfg.stream,
                        began.elapsed().as_secs()
                    ));
                }
            }
        };
        let replica = replica_name()?;
        Ok(Arc::new(Fleet {
            client: client.clone(),
            stream,
            js,
            prefix: cfg.subject_prefix.clone(),
            timeout: cfg.timeout,
            max_payload: client.server_info().max_payload,
            replica,
            next_id: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
        }))
    }

    /// The subject of log `id`.
    pub(crate) fn subject(&self, id: &str) -> String {
        format!("{}.{}", self.prefix, id.replace('.', "="))
    }

    /// Every log the stream holds, with its messages, by id.
    pub(crate) async fn logs(&self) -> Result<Vec<(String, usize)>, String> {
        use futures_util::TryStreamExt;
        let mut info = self
            .stream
            .info_with_subjects(format!("{}.>", self.prefix))
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some((subject, n)) = info.try_next().await.map_err(|e| e.to_string())? {
            if let Some(id) = subject.strip_prefix(&format!("{}.", self.prefix)) {
                out.push((id.replace('=', "."), n));
            }
        }
        out.sort();
        Ok(out)
    }

    pub(super) fn fresh_id(&self, subject: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("wmreplay:{subject}:batch:{}:{n}", self.replica)
    }
}

/// 128 random bits, hex: this process's name in message ids (a pid and a
/// clock may repeat across containers).
pub(super) fn replica_name() -> Result<String, String> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}
