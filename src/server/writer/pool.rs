//! The writer threads: one small pool for every log the process writes,
//! not a thread per log. Each log is owned by one thread of the pool (by
//! its writer's id), so its appends stay in one order and one file handle,
//! and a thread serves many logs, a round of jobs at a time. A log's file
//! and journal are closed once it is idle ([`IDLE_CLOSE`]) or its last
//! [`Writer`](super::Writer) handle is dropped, and reopened on its next
//! append, so the descriptors held follow the logs in use, not the logs
//! ever written.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::local::{Appender, Job, Spec};

/// A log unused this long has its file and journal closed.
pub(super) const IDLE_CLOSE: Duration = Duration::from_secs(10);

/// Most jobs taken in one round.
const MAX_ROUND: usize = 256;

/// What a pool thread is asked.
pub(super) enum Msg {
    /// A log opened by its writer's start, now this thread's.
    Adopt {
        id: u64,
        spec: Spec,
        appender: Box<Appender>,
    },
    /// An append to log `id`.
    Job { id: u64, job: Job },
    /// Log `id`'s last handle is gone: finish its jobs, close it, then say so.
    Close { id: u64, done: Sender<()> },
    /// Log `id` is idle: finish its jobs and close its files (its next
    /// append opens them again).
    Rest { id: u64 },
}

/// The pool: its threads' queues.
pub(super) struct Pool {
    queues: Vec<Sender<Msg>>,
    next: AtomicU64,
}

/// Threads in the pool: four per core, at least 16 and at most 64. Appends
/// mostly wait on the disk (each log's round ends with its `fsync`), so
/// many more threads than cores keep the disk busy with many logs' syncs
/// at once.
fn size() -> usize {
    (crate::replay::cores() * 4).clamp(16, 64)
}

/// The process's pool, started on first use.
pub(super) fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let queues = (0..size())
            .map(|i| {
                let (tx, rx) = channel();
                std::thread::Builder::new()
                    .name(format!("wmreplay-writer-{i}"))
                    .spawn(move || run(rx))
                    .expect("a writer thread starts");
                tx
            })
            .collect();
        Pool {
            queues,
            next: AtomicU64::new(1),
        }
    })
}

impl Pool {
    /// A new writer's id and the queue of the thread that owns it.
    pub(super) fn place(&self) -> (u64, Sender<Msg>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let q = &self.queues[(id % self.queues.len() as u64) as usize];
        (id, q.clone())
    }
}

/// A log as its thread holds it.
struct Slot {
    spec: Spec,
    /// Open (`None`: closed while idle, reopened on the next append).
    appender: Option<Box<Appender>>,
    /// The clock of the last line written (kept across a close).
    last_ts: u64,
    used: Instant,
}

impl Slot {
    fn close(&mut self) {
        if let Some(mut a) = self.appender.take() {
            self.last_ts = a.last_ts();
            a.settle();
        }
    }
}

fn run(rx: Receiver<Msg>) {
    let mut logs: HashMap<u64, Slot> = HashMap::new();
    loop {
        let first = match rx.recv_timeout(IDLE_CLOSE / 4) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                close_idle(&mut logs);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut msgs = vec![first];
        while msgs.len() < MAX_ROUND {
            match rx.try_recv() {
                Ok(m) => msgs.push(m),
                Err(_) => break,
            }
        }
        // Each log's jobs in arrival order, written as one round; anything
        // else about a log waits for its jobs before it.
        let mut rounds: Vec<(u64, Vec<Job>)> = Vec::new();
        for m in msgs {
            match m {
                Msg::Job { id, job } => match rounds.iter_mut().find(|(i, _)| *i == id) {
                    Some((_, jobs)) => jobs.push(job),
                    None => rounds.push((id, vec![job])),
                },
                Msg::Adopt { id, spec, appender } => {
                    flush(&mut logs, &mut rounds);
                    let last_ts = appender.last_ts();
                    logs.insert(
                        id,
                        Slot {
                            spec,
                            appender: Some(appender),
                            last_ts,
                            used: Instant::now(),
                        },
                    );
                }
                Msg::Rest { id } => {
                    flush(&mut logs, &mut rounds);
                    if let Some(slot) = logs.get_mut(&id) {
                        slot.close();
                    }
                }
                Msg::Close { id, done } => {
                    flush(&mut logs, &mut rounds);
                    if let Some(mut slot) = logs.remove(&id) {
                        slot.close();
                    }
                    let _ = done.send(());
                }
            }
        }
        flush(&mut logs, &mut rounds);
        close_idle(&mut logs);
    }
}

/// Writes the rounds gathered, each on its log (reopened if it was idle).
fn flush(logs: &mut HashMap<u64, Slot>, rounds: &mut Vec<(u64, Vec<Job>)>) {
    for (id, jobs) in rounds.drain(..) {
        let Some(slot) = logs.get_mut(&id) else {
            // Never adopted: cannot happen (a handle exists only after it).
            for j in jobs {
                j.fail(std::io::Error::other("the log writer has stopped"));
            }
            continue;
        };
        slot.used = Instant::now();
        if slot.appender.is_none() {
            match Appender::open(&slot.spec) {
                Ok(mut a) => {
                    a.resume_clock(slot.last_ts);
                    slot.appender = Some(Box::new(a));
                }
                Err(e) => {
                    tracing::error!(path = %slot.spec.path.display(), error = %e, "cannot reopen the log");
                    for j in jobs {
                        j.fail(std::io::Error::new(e.kind(), e.to_string()));
                    }
                    continue;
                }
            }
        }
        if let Some(a) = slot.appender.as_mut() {
            a.round(jobs);
        }
    }
}

fn close_idle(logs: &mut HashMap<u64, Slot>) {
    for slot in logs.values_mut() {
        if slot.appender.is_some() && slot.used.elapsed() > IDLE_CLOSE {
            tracing::debug!(path = %slot.spec.path.display(), "idle log closed");
            slot.close();
        }
    }
}

/// Closes a log once its last handle is dropped, after its queued jobs.
pub(super) struct CloseOnDrop {
    pub(super) id: u64,
    pub(super) queue: Sender<Msg>,
    pub(super) done: Mutex<Option<Sender<()>>>,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        if let Some(done) = self.done.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = self.queue.send(Msg::Close { id: self.id, done });
        }
    }
}

/// Shared by a log's handles; the log closes when the last one drops.
pub(super) type Closer = Arc<CloseOnDrop>;
