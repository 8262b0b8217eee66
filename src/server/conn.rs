//! Connections: accepting them within a bound, and a bound on everything a
//! connection may hold.
//!
//! - **A connection must ask something.** One that has made no request
//!   within the header timeout (HTTP/1 that sends nothing, HTTP/2 that sends
//!   only its preface) is closed; one idle between requests for the
//!   keep-alive timeout is closed gracefully. HTTP/2 connections are pinged,
//!   and dropped when the pings go unanswered.
//! - **At the connection limit, the idle make room**: a new connection
//!   closes the longest-idle one (no request in flight) instead of waiting
//!   behind it; only when every connection is busy does it wait.
//! - **A client must read.** Each response body knows whether it is waiting
//!   for the client (it gave hyper data, and hyper has not asked for more)
//!   or for the server (it has nothing yet). A connection with a body
//!   waiting for the client longer than the write timeout is dropped, so a
//!   client that stops reading holds nothing for long: not its slot, and
//!   not a turn (whose task gives up on the client and finishes the answer).
//! - **Shutdown has a deadline**: connections are asked to finish, and those
//!   still open when the deadline passes are closed.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::Frame;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tower::ServiceExt;

/// How often each connection checks its bounds.
const TICK: Duration = Duration::from_millis(100);

/// Milliseconds since the first call: a clock cheap to keep in atomics.
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// The bounds of a connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// Time to send a request's headers, and to make a first request.
    pub header_timeout: Duration,
    /// Time a connection may stay open with no request in flight.
    pub keep_alive_timeout: Duration,
    /// Time a response may wait for the client to read.
    pub write_timeout: Duration,
    /// Time open connections get to finish once shutdown starts.
    pub shutdown_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

/// What a connection is doing, for its own checks and for eviction.
struct ConnState {
    opened: u64,
    /// Requests whose response body is not finished.
    active: AtomicUsize,
    /// Requests made so far.
    requests: AtomicU64,
    /// When `active` last fell to zero (or the connection opened).
    idle_since: AtomicU64,
    /// Each unfinished body's "waiting for the client since" (0: waiting
    /// for the server).
    bodies: Mutex<Vec<Weak<AtomicU64>>>,
    /// Asks the connection to close (it is being evicted).
    close: Notify,
}

impl ConnState {
    fn new() -> ConnState {
        let now = now_ms();
        ConnState {
            opened: now,
            active: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            idle_since: AtomicU64::new(now),
            bodies: Mutex::new(Vec::new()),
            close: Notify::new(),
        }
    }

    /// Idle since when, if idle.
    fn idle(&self) -> Option<u64> {
        (self.active.load(Ordering::Acquire) == 0).then(|| self.idle_since.load(Ordering::Acquire))
    }

    /// The longest a body has waited for the client, in ms.
    fn longest_write_wait(&self, now: u64) -> u64 {
        let mut bodies = self.bodies.lock().unwrap_or_else(|p| p.into_inner());
        bodies.retain(|w| w.strong_count() > 0);
        bodies
            .iter()
            .filter_map(Weak::upgrade)
            .map(|since| match since.load(Ordering::Acquire) {
                0 => 0,
                s => now.saturating_sub(s),
            })
            .max()
            .unwrap_or(0)
    }
}

/// A response body that tells its connection whether it waits for the
/// client, and when it ends.
struct WatchedBody {
    inner: Body,
    waiting_on_client: Arc<AtomicU64>,
    conn: Arc<ConnState>,
}

impl http_body::Body for WatchedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        let since = match &r {
            // Handed over: now it is the client's turn to take it.
            Poll::Ready(Some(Ok(_))) => now_ms(),
            // Nothing yet (a stream waiting for the model), or the end.
            _ => 0,
        };
        self.waiting_on_client.store(since, Ordering::Release);
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for WatchedBody {
    fn drop(&mut self) {
        if self.conn.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.conn.idle_since.store(now_ms(), Ordering::Release);
        }
    }
}

/// The open connections, for eviction.
#[derive(Default)]
struct Registry {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<ConnState>>>,
}

impl Registry {
    fn add(&self, c: Arc<ConnState>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, c);
        id
    }

    fn remove(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Asks the longest-idle connection to close; false if none is idle.
    fn evict_one(&self) -> bool {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let oldest = open
            .values()
            .filter_map(|c| c.idle().map(|since| (since, c)))
            .min_by_key(|(since, _)| *since);
        match oldest {
            Some((_, c)) => {
                c.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// Accepts connections until `shutdown` resolves, serving `app` on each
/// within `bounds`; then closes them all within the shutdown timeout (less
/// `early`).
pub(super) async fn accept_loop(
    listener: TcpListener,
    app: Router,
    bounds: Bounds,
    shutdown: impl std::future::Future<Output = ()> + Send,
    early: Duration,
) {
    let slots = Arc::new(Semaphore::new(bounds.max_connections.max(1)));
    let registry = Arc::new(Registry::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut builder =
        hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(bounds.header_timeout);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(20)))
        .keep_alive_timeout(Duration::from_secs(10));
    let mut shutdown = std::pin::pin!(shutdown);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // Full: an idle connection makes room, or we wait for one.
                registry.evict_one();
                tokio::select! {
                    p = slots.clone().acquire_owned() => p.expect("never closed"),
                    () = tokio::time::sleep(TICK) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait, go on.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Nagle off: a relayed event is small, and with it on each waits for
        // the ACK of the one before, which a client's delayed ACK holds for
        // 40 ms.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY refused");
        }
        while tasks.try_join_next().is_some() {}
        let app = app.clone();
        let builder = builder.clone();
        let registry = registry.clone();
        let stop = stop_rx.clone();
        tasks.spawn(async move {
            let state = Arc::new(ConnState::new());
            let id = registry.add(state.clone());
            serve_connection(stream, peer, app, builder, state, bounds, stop).await;
            registry.remove(id);
            drop(permit);
            tracing::trace!(%peer, "connection closed");
        });
    }
    drop(listener);
    tracing::info!(
        connections = tasks.len(),
        "shutting down: finishing open requests"
    );
    let _ = stop_tx.send(true);
    let all_closed = async { while tasks.join_next().await.is_some() {} };
    // Connections still open this long before the shutdown deadline are
    // closed, so that what they held is let go within it.
    if tokio::time::timeout(bounds.shutdown_timeout.saturating_sub(early), all_closed)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown timeout; closing them");
        tasks.abort_all();
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    app: Router,
    builder: hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>,
    state: Arc<ConnState>,
    bounds: Bounds,
    mut stop: watch::Receiver<bool>,
) {
    let conn_state = state.clone();
    let service = tower::service_fn(
        move |mut req: axum::extract::Request<hyper::body::Incoming>| {
            // Who sent it, for the handlers that ask.
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            let app = app.clone();
            let conn = conn_state.clone();
            conn.active.fetch_add(1, Ordering::AcqRel);
            conn.requests.fetch_add(1, Ordering::Relaxed);
            async move {
                let resp = app.oneshot(req.map(Body::new)).await;
                let waiting = Arc::new(AtomicU64::new(now_ms()));
                conn.bodies
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Arc::downgrade(&waiting));
                Ok::<_, std::convert::Infallible>(resp.unwrap_or_else(|e| match e {}).map(|b| {
                    Body::new(WatchedBody {
                        inner: b,
                        waiting_on_client: waiting,
                        conn,
                    })
                }))
            }
        },
    );
    let service = hyper_util::service::TowerToHyperService::new(service);
    let conn = builder
        .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(stream), service)
        .into_owned();
    let mut conn = std::pin::pin!(conn);
    // Once asked to finish: when it is closed anyway.
    let mut deadline: Option<Instant> = None;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            () = state.close.notified() => {
                // Idle (nothing in flight): closing it loses nothing.
                tracing::debug!("idle connection closed to make room");
                return;
            }
            r = stop.changed(), if deadline.is_none() => {
                if r.is_ok() || *stop.borrow() {
                    conn.as_mut().graceful_shutdown();
                    deadline = Some(Instant::now() + bounds.shutdown_timeout);
                }
            }
            _ = tick.tick() => {
                let now = now_ms();
                if let Some(d) = deadline {
                    if Instant::now() > d {
                        tracing::debug!("connection did not finish in time; closed");
                        return;
                    }
                    continue;
                }
                let first = state.requests.load(Ordering::Relaxed) == 0;
                let limit = if first { bounds.header_timeout } else { bounds.keep_alive_timeout };
                if let Some(since) = state.idle()
                    && now.saturating_sub(since.max(state.opened)) > limit.as_millis() as u64
                {
                    tracing::debug!(first, "idle connection closed");
                    if first {
                        return;
                    }
                    conn.as_mut().graceful_shutdown();
                    deadline = Some(Instant::now() + Duration::from_secs(1));
                    continue;
                }
                if state.longest_write_wait(now) > bounds.write_timeout.as_millis() as u64 {
                    tracing::info!("the client stopped reading a response; connection closed");
                    return;
                }
            }
        }
    }
}
