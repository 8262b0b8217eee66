//! `POST /v1/search`: the records of the log best matching a query (see
//! [`crate::search`]), with the options of `wmreplay search`:
//! `{"query": Q, "limit": K, "kinds": [...], "session": ID, "since": MS,
//! "until": MS}`; the answer is `{"query": Q, "hits": [{"offset","ts_ms",
//! "type","score","record"}, ...]}`.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use crate::search::SearchOptions;
use crate::server::app::AppState;
use crate::server::errors::{ApiError, internal, json_object, json_response, string_field};

fn bad(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", message)
}

/// The query and options of a search body.
pub(crate) fn search_request(body: &[u8]) -> Result<(String, SearchOptions), ApiError> {
    let obj = json_object(body)?;
    let query = string_field(&obj, "query", "invalid_query")?
        .ok_or_else(|| bad("`query` is required (a string)".into()))?
        .to_string();
    let mut o = SearchOptions::default();
    if let Some(v) = obj.get("limit").filter(|v| !v.is_null()) {
        o.limit = v
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| (1..=crate::search::MAX_LIMIT).contains(&n))
            .ok_or_else(|| {
                bad(format!(
                    "`limit` is an integer from 1 to {}",
                    crate::search::MAX_LIMIT
                ))
            })?;
    }
    if let Some(v) = obj.get("kinds").filter(|v| !v.is_null()) {
        let kinds = v
            .as_array()
            .and_then(|a| {
                a.iter()
                    .map(|k| k.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| bad("`kinds` is an array of strings".into()))?;
        o.kinds = Some(kinds);
    }
    o.session = string_field(&obj, "session", "invalid_query")?.map(str::to_string);
    for (name, slot) in [("since", &mut o.since), ("until", &mut o.until)] {
        if let Some(v) = obj.get(name).filter(|v| !v.is_null()) {
            *slot = Some(
                v.as_f64()
                    .ok_or_else(|| bad(format!("`{name}` is a number (ts_ms)")))?,
            );
        }
    }
    crate::search::query_words(&query).map_err(|e| bad(e.to_string()))?;
    Ok((query, o))
}

/// `POST …/search`.
pub(crate) async fn search(state: Arc<AppState>, req: Request) -> Result<Response, ApiError> {
    let (body, _held) = state.read_body(req).await?;
    let (query, options) = search_request(&body)?;
    let _permit = state.permit()?;
    state.catch_up().await?;
    let (st, q) = (state.clone(), query.clone());
    let hits = tokio::task::spawn_blocking(move || {
        st.with_search_index(&q, |idx| idx.search(&q, &options))
    })
    .await
    .map_err(|_| internal("search_failed", "the search stopped unexpectedly"))?
    .map_err(|e| match e {
        crate::Error::Query(m) => bad(m),
        e => {
            tracing::error!(error = %e, "search failed");
            internal("search_failed", e.without_paths())
        }
    })?;
    let hits: Vec<Value> = hits
        .iter()
        .map(|h| serde_json::from_str(&h.to_json()).unwrap_or(Value::Null))
        .collect();
    let answer = serde_json::json!({ "query": query, "hits": hits });
    Ok(json_response(StatusCode::OK, answer.to_string()))
}
