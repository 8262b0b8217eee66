//! A streamed answer on its way to the client: the upstream is read at its
//! own pace, and what the client has not read yet is held here up to a
//! bound. A client past the bound (or gone) is let go — its stream ends
//! with an error, so it cannot take a cut answer for a whole one — while
//! the turn reads the answer to its end and records it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::body::Body;
use bytes::Bytes;
use tokio::sync::mpsc;

/// The sending side, held by the turn.
pub(crate) struct Relay {
    tx: mpsc::UnboundedSender<Bytes>,
    unread: Arc<AtomicUsize>,
    behind: Arc<AtomicBool>,
    limit: usize,
    /// A client of this provider's own API: it reads the upstream's events
    /// as they came, not the server's `delta`/`tool`/`done` events.
    pub(crate) raw: Option<super::Provider>,
    /// A client of the OpenAI API that did not ask for the usage chunk
    /// (`stream_options.include_usage`), which the server asks for itself:
    /// the chunk is not relayed (its empty `choices` trips clients).
    pub(crate) drop_usage_chunk: bool,
    /// The events that end the answer, held until the turn's records are
    /// written ([`Relay::release`]): a client that sends its next request
    /// on them finds the answer in the log.
    held: Vec<Bytes>,
}

/// The receiving side: the response body.
pub(crate) struct RelayBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
    unread: Arc<AtomicUsize>,
    behind: Arc<AtomicBool>,
}

/// A relay that holds at most `limit` bytes the client has not read.
pub(crate) fn relay(limit: usize) -> (Relay, RelayBody) {
    let (tx, rx) = mpsc::unbounded_channel();
    let unread = Arc::new(AtomicUsize::new(0));
    let behind = Arc::new(AtomicBool::new(false));
    (
        Relay {
            tx,
            unread: unread.clone(),
            behind: behind.clone(),
            limit,
            raw: None,
            drop_usage_chunk: false,
            held: Vec::new(),
        },
        RelayBody { rx, unread, behind },
    )
}

impl Relay {
    /// Queues `piece` for the client. False when the client is gone or has
    /// fallen more than the bound behind: the relay is over (drop it).
    pub(crate) fn send(&self, piece: Bytes) -> bool {
        let n = piece.len();
        if self.unread.fetch_add(n, Ordering::AcqRel) + n > self.limit {
            self.behind.store(true, Ordering::Release);
            return false;
        }
        self.tx.send(piece).is_ok()
    }

    /// Keeps `piece`, an event of the answer's end, until [`release`](Self::release).
    pub(crate) fn hold(&mut self, piece: Bytes) {
        self.held.push(piece);
    }

    /// Sends the events held: the answer is recorded. False as for
    /// [`send`](Self::send).
    pub(crate) fn release(&mut self) -> bool {
        std::mem::take(&mut self.held)
            .into_iter()
            .all(|piece| self.send(piece))
    }

    /// Bytes queued and not yet taken by the client.
    #[cfg(test)]
    fn unread(&self) -> usize {
        self.unread.load(Ordering::Acquire)
    }
}

impl RelayBody {
    /// The response body: the pieces as the client takes them; ended with an
    /// error if the client fell behind (the connection is then cut rather
    /// than ended cleanly).
    pub(crate) fn into_body(self) -> Body {
        let stream = futures_util::stream::unfold(Some(self), |state| async move {
            let mut me = state?;
            match me.rx.recv().await {
                Some(b) => {
                    me.unread.fetch_sub(b.len(), Ordering::AcqRel);
                    Some((Ok(b), Some(me)))
                }
                None if me.behind.load(Ordering::Acquire) => Some((
                    Err(std::io::Error::other(
                        "the client fell too far behind the answer",
                    )),
                    None,
                )),
                None => None,
            }
        });
        Body::from_stream(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    #[tokio::test]
    async fn a_client_past_the_bound_is_let_go_with_an_error() {
        let (tx, body) = relay(10);
        assert!(tx.send(Bytes::from_static(b"12345")));
        assert!(tx.send(Bytes::from_static(b"12345")));
        assert_eq!(tx.unread(), 10);
        assert!(!tx.send(Bytes::from_static(b"1")), "past the bound");
        drop(tx);
        let mut s = body.into_body().into_data_stream();
        assert_eq!(s.next().await.unwrap().unwrap(), "12345");
        assert_eq!(s.next().await.unwrap().unwrap(), "12345");
        assert!(s.next().await.unwrap().is_err(), "ends with an error");
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn a_client_that_reads_gets_everything_and_a_clean_end() {
        let (tx, body) = relay(10);
        let mut s = body.into_body().into_data_stream();
        for _ in 0..100 {
            assert!(tx.send(Bytes::from_static(b"123456")));
            assert_eq!(s.next().await.unwrap().unwrap(), "123456");
        }
        drop(tx);
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn held_events_reach_the_client_only_when_released() {
        let (mut tx, body) = relay(100);
        let mut s = body.into_body().into_data_stream();
        assert!(tx.send(Bytes::from_static(b"text")));
        tx.hold(Bytes::from_static(b"end"));
        assert_eq!(s.next().await.unwrap().unwrap(), "text");
        let pending = tokio::time::timeout(std::time::Duration::from_millis(50), s.next()).await;
        assert!(pending.is_err(), "a held event was sent");
        assert!(tx.release());
        assert_eq!(s.next().await.unwrap().unwrap(), "end");
        drop(tx);
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn a_client_gone_ends_the_relay() {
        let (tx, body) = relay(10);
        drop(body);
        assert!(!tx.send(Bytes::from_static(b"1")));
    }
}
