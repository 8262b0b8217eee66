//! The writer of a log whose home is a NATS JetStream stream
//! (`serve --jetstream`): log `{id}` is the subject `PREFIX.{id}` (a `.` of
//! the id written `=`, since `.` separates subject tokens), and the local
//! `DIR/{id}.log` is a byte-exact cache of that subject, in sequence order.
//!
//! - **A batch is one message**: its lines, each ending in `\n`, stamped
//!   with the writer's clock. It lands whole or not at all; a batch larger
//!   than the server's `max_payload` is refused.
//! - **Writes serialize across replicas**: each is published with
//!   `Nats-Expected-Last-Subject-Sequence`, the sequence of the last message
//!   the cache holds (a cache synced before publishes without asking the
//!   stream first). On a conflict (another replica wrote) the writer
//!   catches up and publishes again, restamped. Nothing is published while
//!   the client is disconnected (it would be sent on reconnecting, after
//!   the write was answered 503). It is acknowledged only
//!   after JetStream's publish ack (the stream's replicas hold it).
//! - **Never twice**: every publish carries a `Nats-Msg-Id` (derived from
//!   the batch's idempotency key when there is one, else unique to the
//!   batch), so a publish retried after a lost ack, by this replica or by
//!   another with the same key, is recognised (JetStream's duplicate
//!   window, or the id found among the messages caught up) and answered
//!   with where the first one went.
//! - **The cache**: messages are applied in order at the file's end; the
//!   sequence and length applied are kept in `DIR/{id}.log.jsseq`, written
//!   after the bytes, so a cache cut short by a crash is cut back to what
//!   the sidecar says (one that is shorter is rebuilt from the stream, and a
//!   file without a sidecar, from before `--jetstream`, is moved aside). A message that does not end with `\n` (not
//!   written by wmreplay) gets one, the same on every replica. The cache
//!   and its sidecar and index are `cache.rs`.

mod cache;
mod fleet;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use futures_util::future::BoxFuture;

use super::line::render;
use super::{Appended, BatchKey, Durable, Guard, Line, LogIdentity, LogWriter, Named};
use crate::append::now_ms;
use cache::{Cache, Tags, appended_in};

pub use fleet::JetStreamConfig;
use fleet::unavailable;
pub(crate) use fleet::{Fleet, Unavailable};

/// A cache more messages behind than this catches up through an ordered
/// consumer; closer, one request a message.
const STREAMED_FROM: u64 = 64;

/// The writer of one log kept in a JetStream subject.
pub(crate) struct JetStreamWriter {
    fleet: Arc<Fleet>,
    subject: String,
    path: PathBuf,
    cache: tokio::sync::Mutex<Option<Cache>>,
    /// When the cache last matched the stream (ms since the epoch; 0:
    /// never).
    synced: AtomicU64,
}

/// `work`, or the stream unavailable once `deadline` passes.
async fn by(
    deadline: tokio::time::Instant,
    work: impl std::future::Future<Output = io::Result<()>>,
) -> io::Result<()> {
    tokio::time::timeout_at(deadline, work)
        .await
        .unwrap_or_else(|_| {
            Err(unavailable(
                "the stream did not answer in time (--jetstream-timeout)",
            ))
        })
}

impl JetStreamWriter {
    pub(crate) fn new(fleet: Arc<Fleet>, id: &str, path: &Path) -> JetStreamWriter {
        JetStreamWriter {
            subject: fleet.subject(id),
            fleet,
            path: path.to_path_buf(),
            cache: tokio::sync::Mutex::new(None),
            synced: AtomicU64::new(0),
        }
    }

    /// The cache, locked, waited for until `deadline` (one deadline per
    /// request, however many wait on the log: a write behind five others
    /// that wait on an unreachable stream is answered when its own time is
    /// up, not after theirs and then its own).
    async fn cache_by(
        &self,
        deadline: tokio::time::Instant,
    ) -> io::Result<tokio::sync::MutexGuard<'_, Option<Cache>>> {
        tokio::time::timeout_at(deadline, self.cache())
            .await
            .unwrap_or_else(|_| {
                Err(unavailable(
                    "other requests on this log kept it busy until the deadline",
                ))
            })
    }

    async fn cache(&self) -> io::Result<tokio::sync::MutexGuard<'_, Option<Cache>>> {
        let mut g = self.cache.lock().await;
        if g.is_none() {
            *g = Some(Cache::open(&self.path)?);
        }
        Ok(g)
    }

    /// Brings the cache up to the subject's last message.
    async fn catch_up(&self, c: &mut Cache) -> io::Result<()> {
        let stream = &self.fleet.stream;
        let last = match stream.get_last_raw_message_by_subject(&self.subject).await {
            Ok(m) => m.sequence,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => 0,
            Err(e) => return Err(unavailable(e)),
        };
        if last < c.seq {
            // The subject lost messages the cache holds (the stream was
            // purged or made anew): the cache is rebuilt.
            tracing::warn!(subject = %self.subject, cached = c.seq, last, "the stream is behind the cache; rebuilding it");
            c.reset()?;
        }
        if last - c.seq > STREAMED_FROM {
            self.stream_in(c, last).await?;
        }
        while c.seq < last {
            let m = stream
                .raw_message_builder()
                .sequence(c.seq + 1)
                .next_by_subject(self.subject.clone())
                .send()
                .await
                .map_err(unavailable)?;
            if m.sequence <= c.seq {
                return Err(unavailable("the stream answered an old message"));
            }
            let id = m.headers.get(async_nats::header::NATS_MESSAGE_ID);
            let tags = tags_of(Some(&m.headers));
            c.apply(m.sequence, id.map(AsRef::<str>::as_ref), tags, m.payload)?;
            metrics::counter!("wmreplay_jetstream_caught_up_messages_total").increment(1);
        }
        self.synced.store(now_ms(), Ordering::Relaxed);
        Ok(())
    }

    /// Applies the subject's messages after the cache's up to `last`
    /// through an ordered consumer (one stream of messages, not a request
    /// each): how a cache far behind, or rebuilt, catches up.
    async fn stream_in(&self, c: &mut Cache, last: u64) -> io::Result<()> {
        use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
        use futures_util::StreamExt;
        let consumer = self
            .fleet
            .stream
            .create_consumer(OrderedConfig {
                filter_subject: self.subject.clone(),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: c.seq + 1,
                },
                ..Default::default()
            })
            .await
            .map_err(unavailable)?;
        let mut messages = consumer.messages().await.map_err(unavailable)?;
        while c.seq < last {
            let m = match tokio::time::timeout(self.fleet.timeout, messages.next()).await {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(e))) => return Err(unavailable(e)),
                Ok(None) | Err(_) => return Err(unavailable("the stream stopped sending")),
            };
            let seq = m.info().map_err(unavailable)?.stream_sequence;
            if seq <= c.seq {
                continue;
            }
            let id = m
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
                .map(|v| AsRef::<str>::as_ref(v).to_string());
            let tags = tags_of(m.headers.as_ref());
            c.apply(seq, id.as_deref(), tags, m.payload.clone())?;
            metrics::counter!("wmreplay_jetstream_caught_up_messages_total").increment(1);
        }
        Ok(())
    }

    /// Publishes `lines` as one message after the cache's last one,
    /// catching up and publishing again on a conflict, until the stream
    /// acknowledges it (or the deadline passes). With `guard`, nothing is
    /// published when a record caught up breaks it.
    async fn publish(
        &self,
        lines: &[Line],
        id: String,
        tags: Tags,
        guard: Option<&Guard>,
    ) -> io::Result<Result<Named, u64>> {
        let body = tags.body.as_deref();
        // One deadline from the request's arrival, for every wait below.
        let deadline = super::arrived() + self.fleet.timeout;
        let mut g = self.cache_by(deadline).await?;
        let c = g.as_mut().expect("the cache is open");
        let mut pause = Duration::from_millis(20);
        // The messages this call sent (one found under its id is its own
        // when it is one of them: its ack was lost), and the sequence a
        // duplicate ack named.
        let mut sent: Vec<bytes::Bytes> = Vec::new();
        let mut landed: Option<u64> = None;
        // A cache synced before publishes at once: if another replica wrote
        // since, the expected sequence refuses the message and the next
        // round catches up (one request to the stream saved a write).
        let mut optimistic = self.synced.load(Ordering::Relaxed) > 0;
        loop {
            let caught = if std::mem::take(&mut optimistic) {
                Ok(())
            } else {
                by(deadline, self.catch_up(c)).await
            };
            if let Err(e) = caught {
                if tokio::time::Instant::now() + pause >= deadline {
                    return Err(e);
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
                continue;
            }
            let there = match (c.found(&id), landed) {
                (Some(r), _) => Some((
                    r.offset,
                    c.bytes_of(&r)?,
                    Tags {
                        body: r.body,
                        meta: r.meta,
                    },
                )),
                (None, Some(seq)) if seq <= c.seq => match c.message(seq)? {
                    Some((off, bytes)) => Some((off, bytes, self.tags_at(seq).await)),
                    None => None,
                },
                _ => None,
            };
            if let Some((off, bytes, theirs)) = there {
                let existed = !sent.iter().any(|p| p[..] == bytes[..]);
                // The same key (name) for another request: the one written
                // stands, and this request is refused, whichever replica
                // wrote it.
                if existed
                    && let (Some(ours), Some(theirs)) = (body, theirs.body.as_deref())
                    && ours != theirs
                {
                    return Err(io::Error::other(super::KeyReused));
                }
                return Ok(Ok(Named {
                    existed,
                    appended: appended_in(off, &bytes),
                    meta: theirs.meta,
                }));
            }
            if landed.is_some_and(|seq| seq <= c.seq) {
                return Err(unavailable(
                    "the stream says this batch was written, at a sequence this cache does not hold",
                ));
            }
            if let Some(g) = guard
                && let Some(at) = crate::append::guard_broken(&c.file, c.len, g)?
            {
                return Ok(Err(at));
            }
            let mut buf = Vec::new();
            let mut ts = c.last_ts;
            let appended = render(&mut buf, lines, &mut ts);
            if buf.len() > self.fleet.max_payload {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "the batch is {} bytes, more than a message of the stream may be ({})",
                        buf.len(),
                        self.fleet.max_payload
                    ),
                ));
            }
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, id.as_str());
            if let Some(b) = body {
                headers.insert(BODY_HEADER, b);
            }
            if let Some(m) = tags.meta.as_deref() {
                headers.insert(META_HEADER, m);
            }
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                c.seq.to_string().as_str(),
            );
            let payload = bytes::Bytes::from(buf);
            // Never queued while disconnected: the client would send it on
            // reconnecting, after this write was answered 503.
            if self.fleet.client.connection_state() != async_nats::connection::State::Connected {
                if tokio::time::Instant::now() + pause >= deadline {
                    return Err(unavailable("not connected to the stream"));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
                optimistic = false;
                continue;
            }
            let began = std::time::Instant::now();
            sent.push(payload.clone());
            let published = async {
                match self
                    .fleet
                    .js
                    .publish_with_headers(self.subject.clone(), headers, payload.clone())
                    .await
                {
                    Ok(ack) => ack.await,
                    Err(e) => Err(e),
                }
            };
            let Ok(sent) = tokio::time::timeout_at(deadline, published).await else {
                // Its fate unknown: a retry (under the same id) finds it if
                // it landed.
                return Err(unavailable(
                    "the stream did not acknowledge the write in time (--jetstream-timeout)",
                ));
            };
            metrics::histogram!("wmreplay_jetstream_publish_duration_seconds")
                .record(began.elapsed().as_secs_f64());
            match sent {
                Ok(ack) if !ack.duplicate && ack.sequence > c.seq => {
                    metrics::counter!("wmreplay_records_written_total")
                        .increment(lines.len() as u64);
                    let offset = c.len;
                    c.apply(ack.sequence, Some(&id), tags.clone(), payload)?;
                    c.last_ts = c.last_ts.max(ts);
                    return Ok(Ok(Named {
                        appended: appended
                            .into_iter()
                            .map(|a| Appended {
                                offset: a.offset + offset,
                                ..a
                            })
                            .collect(),
                        existed: false,
                        meta: None,
                    }));
                }
                // A message of this id landed before (this call's, its ack
                // lost, or an earlier request's): found next round, by its
                // sequence once caught up.
                Ok(ack) => landed = Some(ack.sequence),
                Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                    self.fleet.conflicts.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("wmreplay_jetstream_conflicts_total").increment(1);
                    tracing::debug!(subject = %self.subject, "another replica wrote first; catching up");
                    if tokio::time::Instant::now() >= deadline {
                        return Err(unavailable(
                            "other replicas kept writing this log first until the deadline",
                        ));
                    }
                }
                Err(e) if e.kind() == PublishErrorKind::MaxPayloadExceeded => {
                    return Err(io::Error::new(io::ErrorKind::InvalidInput, e.to_string()));
                }
                Err(e) => {
                    if tokio::time::Instant::now() + pause >= deadline {
                        return Err(unavailable(e));
                    }
                    tracing::warn!(subject = %self.subject, error = %e, "publishing failed; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        }
    }
}

impl JetStreamWriter {
    /// The headers the message of sequence `seq` was written with, asked of
    /// the stream (a duplicate ack names only the sequence).
    async fn tags_at(&self, seq: u64) -> Tags {
        match self.fleet.stream.get_raw_message(seq).await {
            Ok(m) => tags_of(Some(&m.headers)),
            Err(_) => Tags::default(),
        }
    }
}

/// The header a keyed or named batch carries its request's hash in.
const BODY_HEADER: &str = "Wmreplay-Body";
/// The header a named batch carries what else it says in (a turn's close:
/// its answer but the text).
const META_HEADER: &str = "Wmreplay-Meta";

fn tags_of(headers: Option<&async_nats::HeaderMap>) -> Tags {
    let get = |name: &str| {
        headers
            .and_then(|h| h.get(name))
            .map(|v| AsRef::<str>::as_ref(v).to_string())
    };
    Tags {
        body: get(BODY_HEADER),
        meta: get(META_HEADER),
    }
}

impl LogWriter for JetStreamWriter {
    fn append_batch(
        &self,
        lines: Vec<Line>,
        key: Option<BatchKey>,
    ) -> BoxFuture<'_, io::Result<Vec<Appended>>> {
        Box::pin(async move {
            let id = match &key {
                Some(k) => format!("wmreplay:{}:key:{}", self.subject, k.key),
                None => self.fleet.fresh_id(&self.subject),
            };
            let tags = Tags {
                body: key.as_ref().map(|k| k.body.clone()),
                meta: None,
            };
            match self.publish(&lines, id, tags, None).await? {
                Ok(n) => Ok(n.appended),
                Err(_) => unreachable!("no guard, never broken"),
            }
        })
    }

    fn append_keyed(
        &self,
        lines: Vec<Line>,
        key: BatchKey,
    ) -> BoxFuture<'_, io::Result<(Vec<Appended>, bool)>> {
        Box::pin(async move {
            let id = format!("wmreplay:{}:key:{}", self.subject, key.key);
            let tags = Tags {
                body: Some(key.body.clone()),
                meta: None,
            };
            match self.publish(&lines, id, tags, None).await? {
                Ok(n) => Ok((n.appended, n.existed)),
                Err(_) => unreachable!("no guard, never broken"),
            }
        })
    }

    fn append_guarded(
        &self,
        lines: Vec<Line>,
        guard: Guard,
    ) -> BoxFuture<'_, io::Result<Result<Vec<Appended>, u64>>> {
        Box::pin(async move {
            let id = self.fleet.fresh_id(&self.subject);
            Ok(self
                .publish(&lines, id, Tags::default(), Some(&guard))
                .await?
                .map(|n| n.appended))
        })
    }

    fn append_blocking(&self, lines: Vec<Line>) -> io::Result<(Vec<Appended>, Durable)> {
        let handle = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        let appended = handle.block_on(self.append_batch(lines, None))?;
        // Acknowledged by the stream: durable already.
        Ok((appended, super::durable_already()))
    }

    fn read_back(&self, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let file = crate::os::open(
            std::fs::OpenOptions::new().read(true),
            &self.path,
            true,
            false,
        )?;
        let mut buf = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
        crate::os::read_exact_at(&file, &mut buf, offset)?;
        Ok(buf)
    }

    fn identity(&self) -> io::Result<LogIdentity> {
        let meta = std::fs::symlink_metadata(&self.path)?;
        let (dev, inode) = crate::os::file_id(&meta);
        Ok(LogIdentity { dev, inode })
    }

    fn catch_up(&self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            let deadline = super::arrived() + self.fleet.timeout;
            let mut g = self.cache_by(deadline).await?;
            let c = g.as_mut().expect("the cache is open");
            by(deadline, JetStreamWriter::catch_up(self, c)).await
        })
    }

    fn append_named(
        &self,
        lines: Vec<Line>,
        id: String,
        body: Option<String>,
        meta: Option<String>,
    ) -> BoxFuture<'_, io::Result<Named>> {
        Box::pin(async move {
            let id = format!("wmreplay:{}:name:{id}", self.subject);
            match self.publish(&lines, id, Tags { body, meta }, None).await? {
                Ok(n) => Ok(n),
                Err(_) => unreachable!("no guard, never broken"),
            }
        })
    }

    fn find_named(&self, id: &str) -> BoxFuture<'_, io::Result<Option<Named>>> {
        let id = format!("wmreplay:{}:name:{id}", self.subject);
        Box::pin(async move {
            let deadline = super::arrived() + self.fleet.timeout;
            let mut g = self.cache_by(deadline).await?;
            let c = g.as_mut().expect("the cache is open");
            by(deadline, JetStreamWriter::catch_up(self, c)).await?;
            let Some(r) = c.found(&id) else {
                return Ok(None);
            };
            Ok(Some(Named {
                appended: appended_in(r.offset, &c.bytes_of(&r)?),
                existed: true,
                meta: r.meta,
            }))
        })
    }

    fn synced_at(&self) -> Option<u64> {
        Some(self.synced.load(Ordering::Relaxed))
    }

    /// Closes the cache's files (the log and its index) unless a request
    /// holds them; the next request opens them again from the sidecar, as a
    /// replica does at its start, and catches up with the stream.
    fn rest(&self) {
        if let Ok(mut g) = self.cache.try_lock() {
            *g = None;
        }
    }
}
