//! A streamed answer on its way to the client: the upstream is read at its
//! own pace, and what the client has not read yet is held here up to a
//! bound. A burst past the bound (an upstream that sends megabytes at
//! once) is given [`CATCH_UP`] for the client to read its way back under
//! it; a client still past it then (or gone) is let go — its stream gets an
//! error event and is cut, never ended cleanly, so it cannot take a cut
//! answer for a whole one — while the turn reads the answer to its end and
//! records it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use bytes::Bytes;
use tokio::sync::{Notify, mpsc};

use crate::server::errors::ApiError;

/// How long a client past the bound has to read its way back under it.
pub(crate) const CATCH_UP: Duration = Duration::from_secs(1);

/// The sending side, held by the turn.
pub(crate) struct Relay {
    tx: mpsc::UnboundedSender<Bytes>,
    unread: Arc<AtomicUsize>,
    behind: Arc<AtomicBool>,
    /// Signalled each time the client takes a piece.
    taken: Arc<Notify>,
    limit: usize,
    /// A client of this provider's own API: it reads the upstream's events
    /// as they came, not the server's `delta`/`tool`/`done` events.
    pub(crate) raw: Option<super::Provider>,
    /// A client of the OpenAI API that did not ask for the usage chunk
    /// (`stream_options.include_usage`), which the server asks for itself:
    /// the chunk is not relayed (its empty `choices` trips clients).
    pub(crate) drop_usage_chunk: bool,
    /// A client of OpenAI's Responses API (its error events are its own).
    pub(crate) responses: bool,
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
    taken: Arc<Notify>,
}

/// A relay that holds at most `limit` bytes the client has not read.
pub(crate) fn relay(limit: usize) -> (Relay, RelayBody) {
    let (tx, rx) = mpsc::unbounded_channel();
    let unread = Arc::new(AtomicUsize::new(0));
    let behind = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(Notify::new());
    (
        Relay {
            tx,
            unread: unread.clone(),
            behind: behind.clone(),
            taken: taken.clone(),
            limit,
            raw: None,
            drop_usage_chunk: false,
            responses: false,
            held: Vec::new(),
        },
        RelayBody {
            rx,
            unread,
            behind,
            taken,
        },
    )
}

impl Relay {
    /// Queues `piece` for the client. False when the client is gone or has
    /// fallen more than the bound behind: the relay is over (drop it). A
    /// piece larger than the bound is queued once nothing else is unread.
    pub(crate) fn send(&self, piece: Bytes) -> bool {
        let n = piece.len();
        // A piece larger than the bound goes alone, once the client has
        // read everything before it.
        let before = self.unread.fetch_add(n, Ordering::AcqRel);
        if before + n > self.limit && before > 0 {
            self.unread.fetch_sub(n, Ordering::AcqRel);
            self.let_go();
            return false;
        }
        self.tx.send(piece).is_ok()
    }

    /// [`send`](Self::send), giving a client past the bound [`CATCH_UP`]
    /// to read its way back under it first.
    pub(crate) async fn send_paced(&self, piece: Bytes) -> bool {
        let n = piece.len();
        let deadline = tokio::time::Instant::now() + CATCH_UP;
        let past = |unread: usize| unread + n > self.limit && unread > 0;
        while past(self.unread.load(Ordering::Acquire)) && !self.tx.is_closed() {
            let taken = self.taken.notified();
            if !past(self.unread.load(Ordering::Acquire)) {
                break;
            }
            if tokio::time::timeout_at(deadline, taken).await.is_err() {
                break;
            }
        }
        self.send(piece)
    }

    /// Lets a client that fell behind go: its stream gets an error event
    /// (past the bound: it is small, and the last) and is then cut.
    fn let_go(&self) {
        if self.behind.swap(true, Ordering::AcqRel) {
            return;
        }
        let e = ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "client_too_slow",
            "the client fell too far behind the answer and was let go; the answer is \
             recorded whole in the log",
        );
        let event = match self.raw {
            None => crate::server::sse::sse("error", &e.json()),
            Some(p) => super::shapes::error_event(p, &e),
        };
        self.unread.fetch_add(event.len(), Ordering::AcqRel);
        let _ = self.tx.send(event);
    }

    /// Keeps `piece`, an event of the answer's end, until [`release`](Self::release).
    pub(crate) fn hold(&mut self, piece: Bytes) {
        self.held.push(piece);
    }

    /// Sends the events held: the answer is recorded. False as for
    /// [`send`](Self::send).
    pub(crate) async fn release(&mut self) -> bool {
        for piece in std::mem::take(&mut self.held) {
            if !self.send_paced(piece).await {
                return false;
            }
        }
        true
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
                    me.taken.notify_one();
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
    async fn a_client_past_the_bound_is_let_go_with_an_error_event_then_cut() {
        let (tx, body) = relay(10);
        assert!(tx.send(Bytes::from_static(b"12345")));
        assert!(tx.send(Bytes::from_static(b"12345")));
        assert_eq!(tx.unread(), 10);
        assert!(!tx.send(Bytes::from_static(b"1")), "past the bound");
        drop(tx);
        let mut s = body.into_body().into_data_stream();
        assert_eq!(s.next().await.unwrap().unwrap(), "12345");
        assert_eq!(s.next().await.unwrap().unwrap(), "12345");
        let event = s.next().await.unwrap().unwrap();
        assert!(event.starts_with(b"event: error\n"), "{event:?}");
        assert!(
            std::str::from_utf8(&event)
                .unwrap()
                .contains("client_too_slow")
        );
        assert!(
            s.next().await.unwrap().is_err(),
            "then cut, never a clean end"
        );
        assert!(s.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_waits_for_a_client_that_reads_and_lets_go_one_that_does_not() {
        // A client that reads: the burst waits, and every piece arrives.
        let (tx, body) = relay(10);
        let reader = tokio::spawn(async move {
            let mut s = body.into_body().into_data_stream();
            let mut got = Vec::new();
            while let Some(Ok(b)) = s.next().await {
                got.extend_from_slice(&b);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            got
        });
        for _ in 0..20 {
            assert!(tx.send_paced(Bytes::from_static(b"12345")).await);
        }
        drop(tx);
        assert_eq!(reader.await.unwrap(), b"12345".repeat(20));
        // One that never reads: let go after CATCH_UP.
        let (tx, body) = relay(10);
        assert!(tx.send_paced(Bytes::from_static(b"12345")).await);
        assert!(tx.send_paced(Bytes::from_static(b"12345")).await);
        let t = tokio::time::Instant::now();
        assert!(!tx.send_paced(Bytes::from_static(b"1")).await);
        assert_eq!(t.elapsed(), CATCH_UP);
        drop((tx, body));
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
        assert!(tx.release().await);
        assert_eq!(s.next().await.unwrap().unwrap(), "end");
        drop(tx);
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn a_piece_larger_than_the_bound_goes_once_the_client_read_the_rest() {
        let (tx, body) = relay(10);
        let mut s = body.into_body().into_data_stream();
        assert!(tx.send(Bytes::from_static(b"12345")));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(Ok(b)) = s.next().await {
                got.push(b);
            }
            got
        });
        assert!(tx.send_paced(Bytes::from(vec![b'x'; 100])).await);
        drop(tx);
        let got = reader.await.unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].len(), 100);
    }

    #[tokio::test]
    async fn a_client_gone_ends_the_relay() {
        let (tx, body) = relay(10);
        drop(body);
        assert!(!tx.send(Bytes::from_static(b"1")));
    }
}
