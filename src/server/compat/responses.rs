//! A request to OpenAI's Responses API, read into the same [`Asked`] as a
//! Chat Completions one: its `input` items are the messages, developer and
//! system messages (and `instructions`) the system prompt, and the items
//! after the turn's user message (calls, their outputs, reasoning) what
//! continues it, passed on as they came.

use serde_json::Value;

use super::body::Body;
use super::request::{Asked, bad, model_and_stream, role, system_text};
use crate::render::fields::Param;
use crate::server::errors::ApiError;
use crate::server::upstream::Provider;

impl Asked {
    /// Reads a request to OpenAI's Responses API: `input` (a string, or
    /// items: messages of the user, developer, system or assistant with
    /// `input_text` / `output_text` parts, `function_call`s and their
    /// `function_call_output`s, `reasoning` and the rest passed on as they
    /// are), `instructions` and developer or system messages as the system
    /// prompt. `previous_response_id` is resolved by the caller.
    pub(crate) fn parse_responses(body: &[u8]) -> Result<Asked, ApiError> {
        let mut body = Body::read(body).map_err(bad)?;
        let obj = &mut body.obj;
        let (model, stream) = model_and_stream(obj)?;
        let items = match obj.remove("input") {
            Some(Value::String(t)) => vec![serde_json::json!({"role": "user", "content": t})],
            Some(Value::Array(a)) if !a.is_empty() => a,
            Some(Value::Array(_)) => return Err(bad("`input` must hold at least one item")),
            Some(_) => return Err(bad("`input` must be a string or an array of items")),
            None => return Err(bad("`input`: field required")),
        };
        let mut texts = Vec::new();
        if let Some(i) = obj.remove("instructions").filter(|i| !i.is_null()) {
            texts.push(system_text(&i, "instructions")?);
        }
        let mut messages = Vec::with_capacity(items.len());
        for (i, m) in items.into_iter().enumerate() {
            let Some(o) = m.as_object() else {
                return Err(bad(format!("input[{i}] must be an object")));
            };
            let kind = o.get("type").and_then(Value::as_str).unwrap_or("message");
            if kind == "message" {
                let r = o.get("role").and_then(Value::as_str).unwrap_or("");
                if !["user", "assistant", "system", "developer"].contains(&r) {
                    return Err(bad(format!(
                        "input[{i}].role must be one of user, assistant, system, developer"
                    )));
                }
                if !matches!(o.get("content"), Some(Value::String(_) | Value::Array(_))) {
                    return Err(bad(format!(
                        "input[{i}].content must be a string or an array of content parts"
                    )));
                }
                if r == "system" || r == "developer" {
                    texts.push(part_text(&m["content"]).ok_or_else(|| {
                        bad(format!(
                            "input[{i}].content must be text: this endpoint keeps a log of text"
                        ))
                    })?);
                    continue;
                }
            }
            if kind == "function_call_output" && !o.get("call_id").is_some_and(Value::is_string) {
                return Err(bad(format!(
                    "input[{i}]: a function_call_output needs `call_id`"
                )));
            }
            messages.push(m);
        }
        let words = |m: &Value| {
            m.get("type").and_then(Value::as_str).unwrap_or("message") == "message"
                && role(m) == "user"
        };
        let Some(start) = messages.iter().rposition(words) else {
            return Err(bad("`input` must hold a user message"));
        };
        let last = messages.last().expect("a user message");
        let last_kind = last
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        if !words(last) && !last_kind.ends_with("_output") {
            return Err(bad(
                "the last input item must be the user's (a message or a tool's output): this \
                 endpoint does not continue a prefilled answer",
            ));
        }
        let text = part_text(&messages[start]["content"]).ok_or_else(|| {
            bad(format!(
                "input[{start}]: the user's message may hold only text (this endpoint keeps a \
                 log of text; describe an image or a file in words)"
            ))
        })?;
        if text.trim().is_empty() {
            return Err(bad(format!(
                "input[{start}]: the user's message is empty: a turn needs words to answer"
            )));
        }
        // Each output answers a call made before it.
        let mut called: Vec<&str> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            match m.get("type").and_then(Value::as_str) {
                Some("function_call") => {
                    called.push(m.get("call_id").and_then(Value::as_str).unwrap_or(""))
                }
                Some("function_call_output") => {
                    let id = m["call_id"].as_str().unwrap_or("");
                    if !called.contains(&id) {
                        return Err(bad(format!(
                            "input[{i}]: an output for `{id}`, which no function_call before it made"
                        )));
                    }
                }
                _ => {}
            }
        }
        let previous_response_id = match obj.remove("previous_response_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if !id.is_empty() => Some(id),
            Some(_) => return Err(bad("`previous_response_id` must be a response's id")),
        };
        let system = (!texts.is_empty()).then(|| texts.join("\n\n"));
        Ok(Asked {
            provider: Provider::OpenAi,
            model,
            system,
            stream,
            params: body.into_params(),
            messages,
            instructions: Vec::new(),
            responses: true,
            previous_response_id,
            start,
            text,
        })
    }
}

/// The text of a Responses message's content: a string, or its
/// `input_text` / `output_text` (and `refusal`) parts a blank line apart;
/// `None` when it holds anything else.
pub(crate) fn part_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::with_capacity(parts.len());
            for p in parts {
                let t = match p.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text") => p.get("text"),
                    Some("refusal") => p.get("refusal"),
                    _ => return None,
                };
                let t = t?.as_str()?;
                if !t.is_empty() {
                    texts.push(t.to_string());
                }
            }
            Some(texts.join("\n\n"))
        }
        _ => None,
    }
}

/// The leading members of a Responses request sent upstream: the client's
/// model and parameters as it gave them (the upstream checks them), and
/// `stream`.
pub(crate) fn responses_fields(asked: &Asked) -> String {
    let mut members = vec![format!("\"model\":{}", Value::String(asked.model.clone()))];
    for (k, v) in &asked.params {
        let v = match v {
            Param::Tree(v) => v.to_string(),
            Param::Raw(t) => t.raw.get().to_string(),
        };
        members.push(format!("{}:{v}", Value::String(k.clone())));
    }
    if asked.stream {
        members.push("\"stream\":true".into());
    }
    members.join(",")
}
