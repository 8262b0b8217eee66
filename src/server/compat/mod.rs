//! The providers' own APIs as a memory endpoint: `POST
//! /anthropic/v1/messages` (Anthropic Messages) and `POST
//! /openai/v1/chat/completions` (OpenAI Chat Completions), and the same
//! under `/v1/logs/{id}` with `--log-dir`, for the provider the server
//! calls. A client points its SDK's base URL here and sends ordinary
//! requests; the turn is the server's (see the `turn` module), in the
//! provider's shapes:
//!
//! - the turn's input is the request's last message in the user's words;
//!   the messages before it that the session's records hold are not sent
//!   (the replay stands for them) and those it lacks are written first
//!   (`history.rs`); instructions among them (Anthropic's `role: "system"`
//!   messages) are sent after it, never written;
//! - the request sent upstream is the replay with the client's model,
//!   system prompt (after the server's), tools, tool choice and parameters
//!   (checked by the provider's rules), and after the turn's user message
//!   the client's own messages that continue it: the model's calls of the
//!   client's tools and their results;
//! - the answer is the upstream's own (a stream relayed event by event),
//!   recorded as `text_output` and, for each call of a client's tool, a
//!   `tool_call` record;
//! - errors come in the provider's shape with the upstream's status, so
//!   that an SDK raises its own typed exceptions;
//! - a request is keyed by `Idempotency-Key` when it has one, and else by
//!   its conversation (its session, words and messages): a request that
//!   repeats the session's last turn is that turn, whatever its retry
//!   headers say (`conversation_key`);
//! - the client's key (`x-api-key` or `Authorization: Bearer`) is the
//!   server's access token, or with `--forward-client-key` the key the
//!   upstream is called with; it is never logged or echoed.
//!
//! Files: `request.rs` (the request read), `history.rs` (what the log
//! holds of it), `responses.rs` (a Responses API request read into the
//! same), `side.rs` (requests beside the conversation, relayed
//! without the log).

mod body;
mod count;
mod history;
mod request;
mod responses;
mod session_tail;
mod side;
mod tail;
mod window;

pub(crate) use count::count_tokens;

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use crate::server::app::AppState;
use crate::server::app::logs::Server;
use crate::server::errors::{ApiError, idempotency_key};
use crate::server::turn::{self, Compat, Input, request_hash};
use crate::server::upstream::ApiKey;
use crate::server::upstream::{Provider, shapes};
use request::Asked;

/// Answers a request to a provider-compatible endpoint of the log `id`
/// (the one `--log` when `None`), every failure in the provider's shape.
pub(crate) async fn handle(
    server: Arc<Server>,
    id: Option<String>,
    provider: Provider,
    req: Request,
) -> Response {
    answer(server, id, provider, false, req).await
}

/// Answers a request to OpenAI's Responses API (`…/openai/v1/responses`)
/// of the log `id`, every failure in OpenAI's shape.
pub(crate) async fn handle_responses(
    server: Arc<Server>,
    id: Option<String>,
    req: Request,
) -> Response {
    answer(server, id, Provider::OpenAi, true, req).await
}

async fn answer(
    server: Arc<Server>,
    id: Option<String>,
    provider: Provider,
    responses: bool,
    req: Request,
) -> Response {
    let retries = server.shared.cfg.upstream_retries;
    let mut r = match serve(server, id.as_deref(), provider, responses, req).await {
        Ok(r) => r,
        Err(e) => {
            let mut r = shapes::error_response(provider, &e);
            // Retried by the server already (`--upstream-retries`): the SDK
            // is told not to multiply its calls. With none, the SDK's own
            // retries are the ones there are.
            if retries > 0 && shapes::from_upstream(&e) {
                shapes::no_more_retries(&mut r);
            }
            r
        }
    };
    if let Ok(v) = HeaderValue::from_str(&shapes::fresh_id("req_wm")) {
        r.headers_mut()
            .insert(shapes::request_id_header(provider), v);
    }
    r
}

async fn serve(
    server: Arc<Server>,
    id: Option<&str>,
    provider: Provider,
    responses: bool,
    req: Request,
) -> Result<Response, ApiError> {
    let (state, main) = called(&server, id, provider)?;
    // A Responses request goes to the upstream's Responses API.
    let alt = match responses {
        false => None,
        true => Some(main.responses().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "this server's upstream is a full endpoint URL whose Responses API is not known: \
                 point --upstream at the API's base (https://api.openai.com) or at \
                 …/v1/chat/completions",
            )
        })?),
    };
    let headers = req.headers().clone();
    // What the provider takes (Claude Code's own requests pass 1 MiB); the
    // records written stay within --max-record-bytes.
    let limit = state.cfg.body_limit.max(PROVIDER_BODY_LIMIT);
    let (body, _held) = state.read_body_up_to(req, limit).await?;
    let asked = match responses {
        true => Asked::parse_responses(&body)?,
        false => Asked::parse(provider, &body)?,
    };
    // What the provider would refuse is refused before anything is written.
    let fields = match responses {
        true => {
            if let Some(id) = &asked.previous_response_id {
                previous_response(&state, id).await?;
            }
            responses::responses_fields(&asked)
        }
        false => state
            .client_fields(&asked.params, asked.stream, &asked.model)
            .map_err(|mut e| {
                e.code = "invalid_request";
                e
            })?,
    };
    let forwarded = match state.cfg.forward_client_key {
        true => Some(client_key(&headers, provider).ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this server calls the model with the client's key: send it as the SDK does \
                 (api_key)",
            )
        })?),
        false => None,
    };
    let session = session_of(&headers, Some(&asked.params))?;
    if side::is_side(&state, &headers, &asked, session.as_deref())? {
        let beta = beta_of(&headers, provider);
        let upstream = alt.as_ref().unwrap_or(&main);
        return side::relay(upstream, body, forwarded.as_ref(), beta.as_deref()).await;
    }
    turn::input_fits(&asked.text, session.as_deref(), state.cfg.max_record_bytes)?;
    let sid = session.as_deref().unwrap_or("");
    let explicit = idempotency_key(&headers, None)?;
    // A key the client gives names this request whole; the server's own
    // names its conversation (whatever parameters a retry changes).
    let hash = match explicit {
        Some(_) => request_hash(&format!("{}\u{0}{sid}", request::canonical(&asked))),
        None => request_hash(&format!("{}\u{0}{sid}", request::conversation(&asked))),
    };
    let made_key = explicit.is_none();
    // The history's plan, the turn's key, the key's claim and the turn's
    // beginning, in one hop to a blocking thread in the turn's own task.
    let ours = made_key && state.writes_locally();
    let beta = beta_of(&headers, provider);
    let prepare: turn::Prepare = Box::new(move |st: &Arc<AppState>| {
        // The server's own key may be answered by a batch a crash left in
        // the journal: the writer settles the journal as it starts, so it
        // starts before the key is looked up.
        if ours {
            st.writer().map_err(|e| st.append_failed(&e))?;
        }
        let log = log_end(st);
        let plan = history::plan(
            &log,
            Some(&st.history_floors),
            &asked,
            session.as_deref(),
            st.cfg.max_record_bytes,
        );
        let key = match explicit {
            Some(k) => k,
            None => conversation_key(st, &plan, &hash)?,
        };
        let planned = turn::plan_key(st, &key, &hash, ours);
        let system = system_of(st, &asked);
        let more = asked.more();
        let window = window::budget(&asked, &fields, &more, beta.as_deref());
        let input = Input {
            text: asked.text.clone(),
            session_id: session,
            stream: asked.stream,
            params: Vec::new(),
            fields,
            key: Some(key),
            skips: false,
            compat: Some(Compat {
                provider,
                model: asked.model.clone(),
                system,
                more,
                input: plan.input,
                before: plan.before,
                after: plan.after,
                key: forwarded,
                hash,
                made_key,
                key_answered: Default::default(),
                beta,
                responses: alt,
                window,
                wants_usage: asked.param("stream_options").is_some_and(|v| {
                    v.get("include_usage") == Some(&serde_json::Value::Bool(true))
                }),
            }),
        };
        Ok((input, planned))
    });
    turn::respond_prepared(state, prepare).await
}

/// Checks a Responses request's `previous_response_id`: the log is the
/// conversation, so the replay stands for it when it names a response
/// this server gave on this log (remembered for `--idempotency-ttl`); any
/// other is a 400 (send the input items instead).
async fn previous_response(state: &Arc<AppState>, id: &str) -> Result<(), ApiError> {
    state.refuse_missing()?;
    let st = state.clone();
    let wanted = id.to_string();
    let known = tokio::task::spawn_blocking(move || {
        let store = st.store()?;
        let store = store.lock().unwrap_or_else(|p| p.into_inner());
        store.answered_response(&st.cfg.log, &wanted)
    })
    .await
    .map_err(|e| crate::server::errors::internal("turn_failed", e))?
    .map_err(crate::server::app::snapshot::replay_failed)?;
    if known {
        return Ok(());
    }
    let mut e = ApiError::new(
        StatusCode::BAD_REQUEST,
        "previous_response_not_found",
        format!(
            "Previous response with id '{id}' not found: this endpoint knows the responses it \
             gave on this log; send the conversation's input items instead"
        ),
    );
    e.code = "previous_response_not_found";
    Err(e)
}

/// The log `id` names and its upstream, when the server calls `provider`'s
/// API with one; otherwise the 404 that says where to point the SDK, or
/// that there is no model to call.
pub(super) fn called(
    server: &Server,
    id: Option<&str>,
    provider: Provider,
) -> Result<(Arc<AppState>, Arc<crate::server::upstream::call::Upstream>), ApiError> {
    let state = server.log(id)?;
    // No model at all comes first: pointing the SDK at the other
    // provider's path would only lead to this same answer.
    let Some(upstream) = state.upstream.clone() else {
        let context = match id {
            Some(id) => format!("/v1/logs/{id}/context"),
            None => "/v1/context".to_string(),
        };
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "this server runs without an upstream: it has no model to call (start it with \
                 --upstream URL --model NAME); the request it would send for a turn is at \
                 POST {context}"
            ),
        ));
    };
    if state.cfg.provider != provider {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!(
                "this server calls the {} API: point the SDK at {}",
                match state.cfg.provider {
                    Provider::Anthropic => "Anthropic",
                    Provider::OpenAi => "OpenAI",
                },
                base_path(state.cfg.provider, id)
            ),
        ));
    }
    Ok((state, upstream))
}

/// The system prompt sent: the server's, then the client's; `None` when
/// the client brings none (the server's alone).
pub(super) fn system_of(state: &AppState, asked: &Asked) -> Option<String> {
    match (state.system.as_str(), asked.system.as_deref()) {
        (_, None) => None,
        ("", Some(c)) => Some(c.to_string()),
        (s, Some(c)) => Some(format!("{s}\n\n{c}")),
    }
}

/// The client's `anthropic-beta` features (on Anthropic's API).
pub(super) fn beta_of(headers: &HeaderMap, provider: Provider) -> Option<String> {
    headers
        .get("anthropic-beta")
        .filter(|_| provider == Provider::Anthropic)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// The largest body the providers' routes take: the Anthropic API's 32 MB
/// (a request of Claude Code's passes 1 MiB). `--body-limit` when larger.
pub(crate) const PROVIDER_BODY_LIMIT: usize = 32 << 20;

/// The provider whose API a path is under (`/anthropic/…`, `/openai/…`,
/// or the same under `/v1/logs/{id}`), whatever its endpoint: its errors,
/// a 404 included, are in that provider's shape.
pub(crate) fn provider_prefix(path: &str) -> Option<Provider> {
    let rest = match path.strip_prefix("/v1/logs/") {
        Some(r) => r.split_once('/').map_or("", |(_, r)| r),
        None => path.strip_prefix('/').unwrap_or(path),
    };
    let first = rest.split('/').next().unwrap_or("");
    match first {
        "anthropic" => Some(Provider::Anthropic),
        "openai" => Some(Provider::OpenAi),
        _ => None,
    }
}

/// `GET …/v1/models`: the upstream's list of models, as it answered it
/// (with the server's key, or the client's with `--forward-client-key`).
pub(crate) async fn models(
    server: Arc<Server>,
    id: Option<String>,
    provider: Provider,
    req: Request,
) -> Response {
    match list_models(&server, id.as_deref(), provider, req).await {
        Ok(r) => r,
        Err(e) => shapes::error_response(provider, &e),
    }
}

async fn list_models(
    server: &Server,
    id: Option<&str>,
    provider: Provider,
    req: Request,
) -> Result<Response, ApiError> {
    let (state, upstream) = called(server, id, provider)?;
    let forwarded = match state.cfg.forward_client_key {
        true => client_key(req.headers(), provider),
        false => None,
    };
    upstream.models(forwarded.as_ref()).await
}

/// Where a client of `p`'s API points its SDK (the base URL's path).
fn base_path(p: Provider, id: Option<&str>) -> String {
    let at = id.map_or(String::new(), |id| format!("/v1/logs/{id}"));
    match p {
        Provider::Anthropic => format!("{at}/anthropic"),
        Provider::OpenAi => format!("{at}/openai/v1"),
    }
}

/// The key the client sent: `x-api-key` (Anthropic's older SDKs), else
/// `Authorization: Bearer`.
pub(crate) fn client_key(headers: &HeaderMap, p: Provider) -> Option<ApiKey> {
    let from = |v: &HeaderValue| v.to_str().ok().map(|s| s.trim().to_string());
    let key = match p {
        Provider::Anthropic => headers.get("x-api-key").and_then(from),
        Provider::OpenAi => None,
    }
    .or_else(|| {
        headers
            .get(header::AUTHORIZATION)
            .and_then(from)
            .and_then(|a| {
                let (scheme, rest) = a.split_once(' ')?;
                scheme
                    .eq_ignore_ascii_case("bearer")
                    .then(|| rest.trim().to_string())
            })
    })?;
    (!key.is_empty()).then_some(ApiKey(key))
}

/// The served log's end, for the history lookup: `None` when there is no
/// log yet, or it cannot be opened (the lookup then finds nothing held,
/// and the turn's own write reports the log's failure).
fn log_end(st: &AppState) -> Option<tail::FileEnd> {
    let (file, meta) = crate::input::open_regular(&st.cfg.log, !st.follows_links()).ok()??;
    Some(tail::FileEnd {
        len: meta.len(),
        id: crate::os::open_file_id(&file).ok(),
        file,
    })
}

/// The session the turn's records name: the `wmreplay-session` header,
/// else the client's own session: Claude Code's `x-claude-code-session-id`
/// (or the `session_id` its `metadata.user_id` carries), Codex's
/// `session-id`.
pub(super) fn session_of(
    headers: &HeaderMap,
    params: Option<&[(String, crate::render::fields::Param)]>,
) -> Result<Option<String>, ApiError> {
    if let Some(v) = headers.get("wmreplay-session") {
        return match v.to_str() {
            Ok(s) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
            _ => Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_session_id",
                "the wmreplay-session header must be printable ASCII",
            )),
        };
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 256)
            .map(str::to_string)
    };
    let from_metadata = || {
        let (_, m) = params?.iter().find(|(k, _)| k == "metadata")?;
        let m = m.tree()?;
        let user: serde_json::Value = serde_json::from_str(m.get("user_id")?.as_str()?).ok()?;
        let s = user.get("session_id")?.as_str()?.trim();
        (!s.is_empty() && s.len() <= 256).then(|| s.to_string())
    };
    Ok(header("x-claude-code-session-id")
        .or_else(from_metadata)
        .or_else(|| header("session-id")))
}

/// The key of a request without an `Idempotency-Key`: its conversation's.
/// A request that continues a turn is keyed by that turn's input and its
/// own messages; a request that repeats the session's last turn (the same
/// history and words, nothing asked since: a client's retry, whatever its
/// retry headers say) gets that turn's key, so its first attempt's answer
/// (or its retry when that attempt failed); any other is a fresh turn,
/// keyed by its conversation and the session's newest record, so that two
/// sends of it before either is written are one turn.
fn conversation_key(st: &AppState, plan: &history::Plan, hash: &str) -> Result<String, ApiError> {
    // The key of the turn whose `text_input` is at `at`, if it was this
    // very request.
    let same_request = |at: u64| -> Result<Option<String>, ApiError> {
        let first = st
            .store()
            .and_then(|store| {
                let store = store.lock().unwrap_or_else(|p| p.into_inner());
                store.turn_at(&st.cfg.log, at)
            })
            .map_err(crate::server::app::snapshot::replay_failed)?;
        Ok(first.and_then(|(key, h)| (h == hash).then_some(key)))
    };
    if let Some(at) = plan.input {
        // A request that continues a turn whose input this very request
        // wrote (its first attempt came before the input was in the log,
        // as a fresh turn: a retry or a second send finds it there) is
        // that turn.
        if let Some(key) = same_request(at)? {
            return Ok(key);
        }
        return Ok(format!("conv-{hash}-c{at}"));
    }
    if let Some(at) = plan.repeats
        && let Some(key) = same_request(at)?
    {
        return Ok(key);
    }
    let newest = plan.newest.map_or("none".to_string(), |o| o.to_string());
    Ok(format!("conv-{hash}-n{newest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_key_is_read_from_either_header() {
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer sk-1"));
        assert_eq!(client_key(&h, Provider::OpenAi).unwrap().0, "sk-1");
        assert_eq!(client_key(&h, Provider::Anthropic).unwrap().0, "sk-1");
        h.insert("x-api-key", HeaderValue::from_static("sk-2"));
        assert_eq!(client_key(&h, Provider::Anthropic).unwrap().0, "sk-2");
        assert_eq!(client_key(&h, Provider::OpenAi).unwrap().0, "sk-1");
        assert!(client_key(&HeaderMap::new(), Provider::OpenAi).is_none());
    }
}
