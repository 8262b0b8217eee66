//! The replayed log as the routes see it: a [`Snapshot`] (the selection
//! applied to the live replay, brought up to date), and the request body
//! made of it.

use std::sync::Arc;

use axum::http::StatusCode;
use bytes::Bytes;
use serde_json::Value;

use super::AppState;
use crate::render::fields::{Member, Param};
use crate::server::errors::ApiError;
use crate::{CurrentRequest, LiveInfo, LiveReplay, ReplayStats, SelectReport};

/// The replayed log, brought up to date.
pub(crate) struct Snapshot {
    pub(crate) chunks: Vec<Bytes>,
    pub(crate) stats: ReplayStats,
    pub(crate) info: LiveInfo,
    pub(crate) select: Option<SelectReport>,
    /// With Anthropic cache breakpoints: how many the messages carry.
    pub(crate) cache_marks: Option<usize>,
    /// With `--facts`: the facts message, written before the request.
    pub(crate) facts: Option<String>,
    /// With `--recall`: the recall message, written after the facts
    /// ([`add_recall`]), and the offsets of the records replayed, sorted.
    pub(crate) recall: Option<String>,
    pub(crate) held: Vec<u64>,
}

/// The selection applied to `live` as it stands. `report`: also find the
/// pending prompt (and report the selection) when the selection does not
/// ask for it. With Anthropic cache breakpoints, `commit` keeps this
/// request's marks for the next one (a turn); without it (a preview) the
/// next request is placed as if this one had not been made.
pub(crate) fn snapshot_of(
    st: &AppState,
    live: &mut LiveReplay,
    report: bool,
    commit: bool,
) -> Result<Snapshot, crate::Error> {
    snapshot_within(st, live, report, commit, None, None)
}

/// [`snapshot_of`] within `window` tokens when the server's selection has
/// no window of its own (a provider-format request's model's), and of the
/// turn's `session` alone with `--sessions-apart`.
pub(crate) fn snapshot_within(
    st: &AppState,
    live: &mut LiveReplay,
    report: bool,
    commit: bool,
    window: Option<u64>,
    session: Option<&str>,
) -> Result<Snapshot, crate::Error> {
    match session.filter(|_| st.cfg.sessions_apart) {
        // The live state replays every session: this session's is made
        // for the turn, as far as the live state has read (a replay of the
        // log, which keeping sessions apart costs).
        Some(id) => {
            let mut sel = st.cfg.selection.clone();
            sel.session = Some(id.to_string());
            let mut scoped = crate::LiveReplay::new(
                &st.cfg.log,
                st.cfg.provider.format(),
                st.cfg.replay.clone(),
            )
            .with_selection(sel);
            if st.cfg.recall.is_some() || st.cfg.tools.search_memory {
                scoped = scoped.tracking_selected();
            }
            scoped.refresh_to(live.info().committed_bytes)?;
            snapshot_in(st, &mut scoped, report, commit, window, Some(id))
        }
        None => snapshot_in(st, live, report, commit, window, None),
    }
}

/// The snapshot of `live` (of the turn's session alone when `apart`).
fn snapshot_in(
    st: &AppState,
    live: &mut LiveReplay,
    report: bool,
    commit: bool,
    window: Option<u64>,
    apart: Option<&str>,
) -> Result<Snapshot, crate::Error> {
    let own;
    let window = window.filter(|_| !st.cfg.selection.has_window());
    let sel = if window.is_some() || apart.is_some() {
        let mut s = st.cfg.selection.clone();
        s.max_tokens = window.or(s.max_tokens);
        if let Some(id) = apart {
            s.session = Some(id.to_string());
        }
        own = s;
        &own
    } else {
        &st.cfg.selection
    };
    // A session's own window starts and cache marks are not the server's
    // to remember.
    let apart = apart.is_some();
    let mut cache_marks = None;
    let (chunks, select) = if sel.is_everything()
        && !report
        && !st.marks_cache()
        && st.cfg.recall.is_none()
        && !st.cfg.tools.search_memory
    {
        (live.chunks(), None)
    } else {
        let mut window = st.window.lock().unwrap_or_else(|p| p.into_inner());
        let (chunks, report) = if st.marks_cache() {
            let mut slot = st.cache.lock().unwrap_or_else(|p| p.into_inner());
            let mut memory = *slot;
            let (chunks, report, marks) = live.select_cached(
                sel,
                if apart { None } else { *window },
                &st.cache_policy(),
                &mut memory,
            )?;
            if commit && !apart {
                *slot = memory;
            }
            cache_marks = Some(marks);
            (chunks, report)
        } else {
            live.select(sel, if apart { None } else { *window })?
        };
        if sel.trim_to.is_some() && !apart && report.window_start != *window {
            *window = report.window_start;
            let store = st.store()?;
            let store = store.lock().unwrap_or_else(|p| p.into_inner());
            store.set_window_start(&st.cfg.log, &sel.window_key(), report.window_start)?;
        }
        (chunks, Some(report))
    };
    Ok(Snapshot {
        chunks,
        stats: live.stats().clone(),
        info: live.info(),
        select,
        cache_marks,
        facts: if sel.facts {
            live.facts_text().map(str::to_string)
        } else {
            None
        },
        recall: None,
        held: if st.cfg.recall.is_some() || st.cfg.tools.search_memory {
            live.selected_offsets().to_vec()
        } else {
            Vec::new()
        },
    })
}

pub(crate) fn replay_failed(e: crate::Error) -> ApiError {
    if let crate::Error::Io { source, .. } = &e
        && crate::os::is_link_refused(source)
    {
        // Under --log-dir, a log swapped for a link after the request's check.
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "log_is_a_link",
            "the log is a symbolic link; under --log-dir none is followed",
        );
    }
    tracing::error!(error = %e, "replay failed");
    match e {
        // The server keeps serving; this log needs more memory than there is.
        crate::Error::OutOfMemory { .. } => ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "insufficient_memory",
            e.to_string(),
        ),
        e => ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "replay_failed",
            e.to_string(),
        ),
    }
}

/// With `--recall K`: the recall message for `text`, leaving out the
/// records the snapshot replays and those at or after `before` (a turn's
/// own input). Blocking (the index is brought up to date): call it off the
/// async threads, without the live state held. A recall that fails is
/// logged and left out; the turn goes on without it.
pub(crate) fn add_recall(st: &AppState, snap: &mut Snapshot, text: &str, before: u64) {
    let Some(k) = st.cfg.recall else {
        return;
    };
    let held = &snap.held;
    let found = st.with_search_index(text, |idx| {
        idx.recall(text, k, &|o| o >= before || held.binary_search(&o).is_ok())
    });
    match found {
        Ok(r) => snap.recall = r,
        Err(e) => tracing::warn!(error = %e, "recall failed; the turn goes on without it"),
    }
}

/// The log replayed up to its end.
pub(crate) async fn snapshot(state: &Arc<AppState>, report: bool) -> Result<Snapshot, ApiError> {
    with_live(state, move |st, live| snapshot_of(st, live, report, false)).await
}

/// `f` on the log's live state brought up to its end, off the async
/// threads, admitted as a replay.
pub(crate) async fn with_live<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&AppState, &mut LiveReplay) -> Result<T, crate::Error> + Send + 'static,
) -> Result<T, ApiError> {
    let _held = state.admit_replay()?;
    state.catch_up().await?;
    let st = state.clone();
    let res = tokio::task::spawn_blocking(move || {
        let mut live = st.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.refresh()?.rebuilt {
            // Another file now: a remembered window start means nothing.
            *st.window.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        let out = f(&st, &mut live);
        st.note_held(&live);
        out
    })
    .await;
    match res {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(replay_failed(e)),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "replay_failed",
            format!("the replay task failed: {e}"),
        )),
    }
}

pub(crate) fn stats_json(stats: &ReplayStats, max_skips: usize) -> Value {
    serde_json::from_str(&stats.to_json(max_skips)).expect("stats are JSON")
}

impl AppState {
    /// The request's leading fields for `input`: the model, the answer's
    /// limit, streaming, the operator's `--upstream-field`s, the client's
    /// `params` (checked against the provider's rules: a 400
    /// `invalid_params` naming the field), the prompt cache key. Empty
    /// without a model (no upstream): the contract's body.
    pub(crate) fn fields_for(
        &self,
        params: &[(String, Value)],
        stream: bool,
    ) -> Result<String, ApiError> {
        let params: Vec<(&str, Member<'_>)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), Member::Tree(v)))
            .collect();
        self.fields_with(&params, stream, None)
    }

    /// [`fields_for`](Self::fields_for) for a client of the provider's own
    /// API: its `model`, and its own tools (the server's are not offered:
    /// the client runs the tools of its request), written as it sent them.
    pub(crate) fn client_fields(
        &self,
        params: &[(String, Param)],
        stream: bool,
        model: &str,
    ) -> Result<String, ApiError> {
        let params: Vec<(&str, Member<'_>)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), v.member()))
            .collect();
        self.fields_with(&params, stream, Some(model))
    }

    fn fields_with(
        &self,
        params: &[(&str, Member<'_>)],
        stream: bool,
        client_model: Option<&str>,
    ) -> Result<String, ApiError> {
        let Some(model) = client_model.or(self.cfg.model.as_deref()) else {
            if let Some((k, _)) = params.first() {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_params",
                    format!("`params` ({k}) need a model: the server runs without --model"),
                ));
            }
            return Ok(String::new());
        };
        let p = self.cfg.provider;
        // Borrowed: a client's tools and system are written, not copied.
        let mut extra: Vec<(&str, Member<'_>)> = self
            .cfg
            .upstream_fields
            .iter()
            .map(|(k, v)| (k.as_str(), Member::Tree(v)))
            .collect();
        // The operator's stream options go with streamed requests only.
        if !stream {
            extra.retain(|&(k, _)| k != "stream_options");
        }
        let defs;
        // The server's tools: the client may not bring its own (a client of
        // the provider's API brings its own, and the server's are not
        // offered).
        if client_model.is_none()
            && let Some(d) = crate::server::upstream::tools::definitions(
                p,
                self.cfg.tools.search_memory,
                self.cfg.tools.memory,
            )
        {
            if let Some((k, _)) = params
                .iter()
                .find(|&&(k, _)| k == "tools" || k == "tool_choice")
            {
                return Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_params",
                    format!(
                        "`params.{k}`: this server offers the model its own tools \
                         (--recall-tool, --memory-tool) and runs them itself; a request cannot \
                         add or choose tools"
                    ),
                ));
            }
            defs = d;
            extra.push(("tools", Member::Tree(&defs)));
        }
        // The client's own replace the operator's of the same name.
        for &(k, v) in params {
            extra.retain(|&(name, _)| name != k);
            extra.push((k, v));
        }
        let cache_key = self.cache_key.clone().map(Value::String);
        if let Some(key) = &cache_key
            && !extra.iter().any(|&(k, _)| k == "prompt_cache_key")
        {
            extra.push(("prompt_cache_key", Member::Tree(key)));
        }
        crate::render::fields::request_fields_of(
            p.format(),
            model,
            self.cfg.max_output_tokens,
            stream,
            &extra,
            &self.cfg.allow_params,
        )
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_params", e.message))
    }

    /// The request body's pieces: head, the rendered messages, tail.
    pub(crate) fn body_parts(
        &self,
        snap: &Snapshot,
        current: &CurrentRequest<'_>,
        fields: &str,
    ) -> Vec<Bytes> {
        self.body_parts_with(snap, current, fields, &self.system)
    }

    /// [`body_parts`](Self::body_parts) with `system` for the server's
    /// system prompt.
    pub(crate) fn body_parts_with(
        &self,
        snap: &Snapshot,
        current: &CurrentRequest<'_>,
        fields: &str,
        system: &str,
    ) -> Vec<Bytes> {
        let p = self.cfg.provider;
        let (head, tail) = match snap.cache_marks {
            // The system prompt as a block, marked when a breakpoint is left.
            Some(marks) => {
                let policy = self.cache_policy();
                let member: &[u8] = if marks < policy.max_breakpoints {
                    policy.ttl.member()
                } else {
                    b""
                };
                crate::render::request::cached_envelope(
                    crate::render::request::Lead {
                        fields,
                        facts: snap.facts.as_deref(),
                        recall: snap.recall.as_deref(),
                    },
                    system,
                    current,
                    member,
                )
            }
            None => crate::render::request::lead_envelope(
                p.format(),
                crate::render::request::Lead {
                    fields,
                    facts: snap.facts.as_deref(),
                    recall: snap.recall.as_deref(),
                },
                system,
                current,
            ),
        };
        let mut parts = Vec::with_capacity(snap.chunks.len() + 2);
        parts.push(Bytes::from(head));
        parts.extend(snap.chunks.iter().cloned());
        parts.push(Bytes::from(tail));
        parts
    }
}
