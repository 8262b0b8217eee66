//! A turn's beginning: its `text_input` appended (unless a retry finds it
//! in the log already) and the replay of the log as it stood before it,
//! on a blocking thread — the turn's own hop, or the one a provider route
//! made to claim its key ([`prebegin`]).

use std::sync::Arc;

use super::input::Input;
use super::keys::{KeyPlan, Plan};
use crate::server::app::AppState;
use crate::server::app::snapshot::{Snapshot, add_recall, replay_failed, snapshot_within};
use crate::server::errors::{ApiError, internal};
use crate::server::writer::{self, Line};

/// A beginning that failed: the error, and whether this attempt had
/// written records of the turn (its `text_input`, or the records that
/// continue it), which then need a record that closes the turn.
pub(super) struct Failed {
    pub(super) error: ApiError,
    pub(super) wrote: bool,
}

impl From<ApiError> for Failed {
    /// A failure before anything of the turn was written.
    fn from(error: ApiError) -> Failed {
        Failed {
            error,
            wrote: false,
        }
    }
}

/// Begins a turn whose key was just claimed fresh, on the blocking thread
/// that claimed it. `None` (the turn begins later, in its own hop) for
/// any other plan, or without a permit (refused there, as usual).
pub(super) fn prebegin(st: &Arc<AppState>, input: &Input, planned: &KeyPlan) -> Option<Prebegun> {
    if !matches!(planned.0, Ok(Plan::Fresh(_))) {
        return None;
    }
    let permit = st.permit().ok()?;
    let args = BeginArgs::of(st, input, None);
    let begun = args.admit(st).map_err(Failed::from).and_then(|held| {
        let _held = held;
        begin_blocking(st, args)
    });
    Some(Prebegun { permit, begun })
}

/// What [`begin`] found.
pub(super) enum Begun {
    /// The replay before the turn's input, and the input's offset.
    Replayed(Box<Snapshot>, u64),
    /// The key's input was written by another replica (a log kept in a
    /// stream): this attempt is a retry whose first attempt ran elsewhere.
    Elsewhere,
}

/// Records that `key`'s turn has its input at `offset`: durably (`wait`),
/// synced with the other turns recording theirs now, outside the store's
/// lock; or (a key the server made) committed, made durable with the
/// turn's end ([`finish_key`](super::keys::finish_key)). With `new` (the
/// request's hash), the key is recorded here (a key only this process
/// claims, [`plan_for`](super::keys::plan_for)).
pub(super) fn record_input(st: &AppState, key: &str, offset: u64, wait: bool, new: Option<&str>) {
    let recorded = st.store().and_then(|s| {
        let ticket = (s.lock().unwrap_or_else(|p| p.into_inner())).note_turn_input(
            &st.cfg.log,
            key,
            offset,
            new,
        )?;
        ticket.wait_if(wait && st.cfg.fsync)
    });
    if let Err(e) = recorded {
        tracing::error!(error = %e, "cannot record a turn's input offset");
    }
}

/// Waits until the state store's commits so far are on disk (with
/// `--fsync`): a client's key's row, with its input's offset, before its
/// model is called.
fn sync_store(st: &AppState) {
    let synced = st.store().and_then(|s| {
        let ticket = (s.lock().unwrap_or_else(|p| p.into_inner())).sync_ticket();
        ticket.wait_if(st.cfg.fsync)
    });
    if let Err(e) = synced {
        tracing::error!(error = %e, "cannot sync the state store");
    }
}

/// The message name of a keyed turn's input in a log kept in a stream.
fn input_name(key: &str) -> String {
    format!("turn:{key}:input")
}

/// What the blocking part of [`begin`] returns: the replay before the
/// turn's input, the input's offset and (when it was written now) the
/// acknowledgement to wait for; `None` when another replica wrote it.
type BegunBlocking = Option<(Snapshot, u64, Option<writer::Durable>)>;

/// A turn begun by the route's own blocking task (a provider route's):
/// its permit and what [`begin_blocking`] returned.
pub(crate) struct Prebegun {
    pub(super) permit: tokio::sync::OwnedSemaphorePermit,
    pub(super) begun: Result<BegunBlocking, Failed>,
}

/// What a turn needs to begin, taken from its input.
struct BeginArgs {
    retry: Option<u64>,
    continues: bool,
    before: Vec<Line>,
    after: Vec<Line>,
    key: Option<String>,
    made: bool,
    ours: bool,
    text: String,
    hash: String,
    budget: Option<u64>,
    sid: Option<String>,
    line: Line,
}

impl BeginArgs {
    fn of(state: &AppState, input: &Input, retry: Option<u64>) -> BeginArgs {
        // A request that continues a turn the log holds (a client's tool
        // results): the records it brings are appended, and the replay is
        // the log before the turn's input, as for a retry.
        let held_input = input.compat.as_ref().and_then(|c| c.input);
        let (retry, continues) = match (retry, held_input) {
            (None, Some(offset)) => (Some(offset), true),
            (r, _) => (r, false),
        };
        let (before, after) = match &input.compat {
            Some(c) => (c.before.clone(), c.after.clone()),
            None => (Vec::new(), Vec::new()),
        };
        BeginArgs {
            retry,
            continues,
            before,
            after,
            key: input.key.clone(),
            made: input.made_key(),
            ours: input.key_is_ours(state),
            text: input.text.clone(),
            hash: input.hash(),
            budget: input.window(),
            sid: input.session_id.clone(),
            line: Line::turn("text_input", input.session_id.as_deref(), &input.text, None),
        }
    }

    /// The memory the replay needs, from the budget.
    fn admit(&self, state: &AppState) -> Result<crate::server::app::budget::Reserved, ApiError> {
        match self.retry {
            Some(offset) => state.admit_fresh_replay(offset),
            None => state.admit_replay(),
        }
    }
}

/// The replay the turn's request is made of: the log before the turn's
/// `text_input`, which is appended here unless this is a retry of a turn
/// whose input is already at `retry`; and the input's offset.
pub(super) async fn begin(
    state: &Arc<AppState>,
    input: &Input,
    retry: Option<u64>,
) -> Result<Begun, Failed> {
    let args = BeginArgs::of(state, input, retry);
    let held = args.admit(state)?;
    let st = state.clone();
    let r = tokio::task::spawn_blocking(move || {
        let _held = held;
        begin_blocking(&st, args)
    })
    .await
    .map_err(|e| internal("turn_failed", e))?;
    begun(state, r).await
}

/// [`begin`]'s end: waits for the input's acknowledgement.
pub(super) async fn begun(
    state: &Arc<AppState>,
    r: Result<BegunBlocking, Failed>,
) -> Result<Begun, Failed> {
    let Some((snap, offset, durable)) = r? else {
        return Ok(Begun::Elsewhere);
    };
    if let Some(d) = durable {
        writer::durable(d)
            .await
            .map_err(|e| state.append_failed(&e))?;
    }
    Ok(Begun::Replayed(Box::new(snap), offset))
}

/// [`begin`]'s work on a blocking thread.
fn begin_blocking(st: &Arc<AppState>, args: BeginArgs) -> Result<BegunBlocking, Failed> {
    let BeginArgs {
        retry,
        continues,
        before,
        after,
        key,
        made,
        ours,
        text,
        hash,
        budget,
        sid,
        line,
    } = args;
    if let Some(offset) = retry {
        let mut wrote = false;
        if continues {
            if !after.is_empty() {
                let w = st.writer().map_err(|e| st.append_failed(&e))?;
                w.append_blocking(after).map_err(|e| st.append_failed(&e))?;
                wrote = true;
            }
            if let Some(k) = &key {
                record_input(st, k, offset, !made, ours.then_some(hash.as_str()));
            }
        }
        // The live state has moved on: replay the log's prefix afresh.
        let replayed = injected(st, &text).and_then(|()| {
            let mut fresh = st.cfg.live();
            fresh.refresh_to(offset).map_err(replay_failed)?;
            snapshot_within(st, &mut fresh, false, true, budget, sid.as_deref())
                .map_err(replay_failed)
        });
        let mut snap = replayed.map_err(|error| Failed { error, wrote })?;
        add_recall(st, &mut snap, &text, offset);
        return Ok(Some((snap, offset, None)));
    }
    // Hold the replay while the line is written: nothing else brings
    // it past the line before this turn's snapshot is taken.
    let mut live = st.live.lock().unwrap_or_else(|p| p.into_inner());
    let w = st.writer().map_err(|e| st.append_failed(&e))?;
    // In a log kept in a stream a keyed input is named, so that a
    // retry through another replica finds it instead of writing it
    // twice.
    // The client's history the log lacks, the input, and the
    // turn's tool calls and results the log lacks, in one batch.
    let at = before.len();
    let mut lines = before;
    lines.push(line);
    lines.extend(after);
    let mut recorded_input = false;
    let (appended, durable) = match key.as_deref().filter(|_| w.synced_at().is_some()) {
        Some(k) => {
            let named = tokio::runtime::Handle::current()
                .block_on(w.append_named(lines, input_name(k), Some(hash.clone()), None))
                .map_err(|e| {
                    if crate::server::writer::KeyReused::of(&e) {
                        ApiError::new(
                            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                            "idempotency_key_reused",
                            "this Idempotency-Key was used with another request",
                        )
                    } else {
                        st.append_failed(&e)
                    }
                })?;
            if named.existed {
                return Ok(None);
            }
            (named.appended, writer::durable_already())
        }
        // A turn keyed by its client has its input on disk before
        // its model is called (the key maps to it durably); an
        // unkeyed one, or one keyed by the server, is made durable
        // with its answer (or the record that closes the turn),
        // which is what acknowledges it.
        // Its row takes the input's offset in the batch's own journal
        // step (no crash leaves the input written and the key without it,
        // which a retry would write again), made durable below.
        None if key.is_some() && !made => {
            let input = writer::InputKey {
                key: key.clone().expect("a client's key"),
                hash: hash.clone(),
                line: at,
            };
            let (appended, durable, recorded) = w
                .append_blocking_recording(lines, input)
                .map_err(|e| st.append_failed(&e))?;
            if recorded {
                recorded_input = true;
                sync_store(st);
            }
            (appended, durable)
        }
        // A key only this process claims has its row written with its
        // input, in the writer's own step.
        None => {
            let appended = match key.as_deref().filter(|_| ours) {
                Some(k) => {
                    let input = writer::InputKey {
                        key: k.to_string(),
                        hash: hash.clone(),
                        line: at,
                    };
                    let (appended, recorded) = w
                        .append_unsynced_recording(lines, input)
                        .map_err(|e| st.append_failed(&e))?;
                    recorded_input = recorded;
                    appended
                }
                None => w.append_unsynced(lines).map_err(|e| st.append_failed(&e))?,
            };
            (appended, writer::durable_already())
        }
    };
    let offset = appended[at].offset;
    if let Some(k) = key.as_deref().filter(|_| !recorded_input) {
        record_input(st, k, offset, !made, ours.then_some(hash.as_str()));
    }
    crate::server::failpoint::crash("turn-crash-input", text.as_bytes());
    // From here on the turn's input is in the log: a failure is closed
    // there by the caller.
    let replayed = injected(st, &text).and_then(|()| {
        if live.refresh_to(offset).map_err(replay_failed)?.rebuilt {
            *st.window.lock().unwrap_or_else(|p| p.into_inner()) = None;
            st.history_floors.clear();
        }
        if live.info().committed_bytes > offset {
            // Only if the file changed identity under us: build afresh.
            drop(live);
            let mut fresh = st.cfg.live();
            fresh.refresh_to(offset).map_err(replay_failed)?;
            snapshot_within(st, &mut fresh, false, true, budget, sid.as_deref())
                .map_err(replay_failed)
        } else {
            let s = snapshot_within(st, &mut live, false, true, budget, sid.as_deref())
                .map_err(replay_failed)?;
            st.note_held(&live);
            Ok(s)
        }
    });
    let mut snap = replayed.map_err(|error| Failed { error, wrote: true })?;
    add_recall(st, &mut snap, &text, offset);
    Ok(Some((snap, offset, Some(durable))))
}

/// A replay failure injected by a test (`failpoints`: the point
/// `turn-replay`, for a turn whose text holds its marker), as a read of
/// the log that failed.
fn injected(st: &AppState, text: &str) -> Result<(), ApiError> {
    if crate::server::failpoint::fires("turn-replay", text) {
        let e = std::io::Error::other("a read failed (injected by a test)");
        return Err(replay_failed(crate::Error::io(
            &st.cfg.log,
            "cannot read",
            e,
        )));
    }
    Ok(())
}
