//! Messages nested too deep for the MCP SDK's JSON parser (serde_json stops
//! at 128 levels). The SDK drops such a line over stdio without a word —
//! its client then waits forever — and answers a plain-text 415 over HTTP.
//! They are found here first, by a scan that reads no deeper than the top
//! level, and answered as JSON-RPC errors with the request's own id.

use serde_json::{Value, json};

/// The deepest nesting a message may have (the SDK's parser fails at 128;
/// nothing this server keeps is read deeper than a record, and a replay
/// reads records far shallower than this).
pub(crate) const MAX_DEPTH: usize = 100;

/// The method this server answers a too-deep request through, over stdio:
/// the line is replaced by a request of this method with the same id.
pub(crate) const TOO_DEEP_METHOD: &str = "wmreplay/too_deep";

/// How deep `bytes` (one JSON text) nests: brackets outside strings.
pub(crate) fn depth(bytes: &[u8]) -> usize {
    let (mut d, mut max, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                d += 1;
                max = max.max(d);
            }
            b']' | b'}' => d = d.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The members at the top level of a JSON object, each value's text
/// unparsed; `None` when `bytes` is not an object.
fn top_members(bytes: &[u8]) -> Option<Vec<(String, &[u8])>> {
    let text = bytes.trim_ascii();
    if text.first() != Some(&b'{') {
        return None;
    }
    let mut out = Vec::new();
    let (mut d, mut in_str, mut esc) = (0usize, false, false);
    let mut key_start = None;
    let mut key: Option<String> = None;
    let mut value_start = None;
    for (i, &b) in text.iter().enumerate() {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => {
                    in_str = false;
                    if d == 1
                        && key.is_none()
                        && value_start.is_none()
                        && let Some(s) = key_start.take()
                    {
                        key = serde_json::from_slice::<String>(&text[s..=i]).ok();
                    }
                }
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => {
                in_str = true;
                if d == 1 && key.is_none() && value_start.is_none() {
                    key_start = Some(i);
                }
            }
            b':' if d == 1 && key.is_some() && value_start.is_none() => value_start = Some(i + 1),
            b'[' | b'{' => d += 1,
            b',' | b'}' if d == 1 => {
                if let (Some(k), Some(s)) = (key.take(), value_start.take()) {
                    out.push((k, text[s..i].trim_ascii()));
                }
                if b == b'}' {
                    d = 0;
                }
            }
            b']' | b'}' => d = d.saturating_sub(1),
            _ => {}
        }
    }
    Some(out)
}

/// A message nested deeper than [`MAX_DEPTH`]: what of it can be read.
#[derive(Debug, PartialEq)]
pub(crate) struct TooDeep {
    /// Its id, when it has a plain one (a request; `None`: a notification,
    /// or an id that is not a number or a string).
    pub(crate) id: Option<Value>,
    /// Its method, when it names one.
    pub(crate) method: Option<String>,
    pub(crate) depth: usize,
    /// Its `params._meta`, when shallow enough to read: a client of the
    /// stateless protocol names its version there, and the stand-in keeps it.
    pub(crate) meta: Option<Value>,
}

impl TooDeep {
    /// What the client is told.
    pub(crate) fn message(&self) -> String {
        format!(
            "the {} is nested {} levels deep; this server reads at most {MAX_DEPTH}",
            self.method
                .as_deref()
                .map_or("message".to_string(), |m| format!("`{m}` request")),
            self.depth
        )
    }

    /// The JSON-RPC error answering it (with its id).
    pub(crate) fn error_response(&self) -> Value {
        json!({
            "jsonrpc": "2.0",
            "id": self.id.clone().unwrap_or(Value::Null),
            "error": {"code": -32602, "message": self.message()},
        })
    }

    /// The request that stands for it over stdio: the same id, the method
    /// this server answers with the error.
    pub(crate) fn stand_in(&self) -> Option<Vec<u8>> {
        let id = self.id.as_ref()?;
        let mut params = json!({"depth": self.depth, "method": self.method});
        if let Some(m) = &self.meta {
            params["_meta"] = m.clone();
        }
        let mut line = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": TOO_DEEP_METHOD,
            "params": params,
        })
        .to_string()
        .into_bytes();
        line.push(b'\n');
        Some(line)
    }
}

/// `line` read shallowly when it nests deeper than [`MAX_DEPTH`].
pub(crate) fn too_deep(line: &[u8]) -> Option<TooDeep> {
    let depth = depth(line);
    if depth <= MAX_DEPTH {
        return None;
    }
    let members = top_members(line).unwrap_or_default();
    let get = |k: &str| members.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    let id = get("id")
        .and_then(|v| serde_json::from_slice::<Value>(v).ok())
        .filter(|v| v.is_number() || v.is_string());
    let method = get("method").and_then(|v| serde_json::from_slice::<String>(v).ok());
    let meta = get("params")
        .and_then(top_members)
        .and_then(|p| p.into_iter().find(|(k, _)| k == "_meta"))
        .filter(|(_, v)| self::depth(v) <= MAX_DEPTH)
        .and_then(|(_, v)| serde_json::from_slice::<Value>(v).ok());
    Some(TooDeep {
        id,
        method,
        depth,
        meta,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(n: usize) -> String {
        format!("{}1{}", "[".repeat(n), "]".repeat(n))
    }

    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert_eq!(depth(b"1"), 0);
        assert_eq!(depth(br#"{"a":[1,{"b":2}]}"#), 3);
        assert_eq!(depth(br#"{"a":"[[[[\"{{{"}"#), 1);
        assert_eq!(depth(nested(124).as_bytes()), 124);
    }

    #[test]
    fn a_deep_request_keeps_its_id_and_method() {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"set_fact","_meta":{{"v":"2"}},"arguments":{{"key":"k","value":{}}}}}}}"#,
            nested(124)
        );
        let d = too_deep(line.as_bytes()).unwrap();
        assert_eq!(d.id, Some(json!(7)));
        assert_eq!(d.method.as_deref(), Some("tools/call"));
        assert_eq!(d.depth, 127);
        assert!(d.message().contains("127 levels deep"), "{}", d.message());
        let stand_in: Value = serde_json::from_slice(&d.stand_in().unwrap()).unwrap();
        assert_eq!(stand_in["id"], 7);
        assert_eq!(stand_in["method"], TOO_DEEP_METHOD);
        assert_eq!(stand_in["params"]["_meta"], json!({"v": "2"}));
        assert_eq!(d.error_response()["id"], 7);
        // The id after the params, a string id, and a notification.
        let line = format!(
            r#"{{"params":{},"method":"x","id":"a-1","jsonrpc":"2.0"}}"#,
            nested(120)
        );
        assert_eq!(too_deep(line.as_bytes()).unwrap().id, Some(json!("a-1")));
        let line = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/x","params":{}}}"#,
            nested(120)
        );
        let d = too_deep(line.as_bytes()).unwrap();
        assert_eq!(d.id, None);
        assert!(d.stand_in().is_none());
    }

    #[test]
    fn a_shallow_message_passes() {
        assert!(too_deep(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_none());
        assert!(too_deep(nested(MAX_DEPTH).as_bytes()).is_none());
        assert!(too_deep(nested(MAX_DEPTH + 1).as_bytes()).is_some());
    }
}
