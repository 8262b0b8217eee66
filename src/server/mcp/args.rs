//! A tool call's arguments checked, each refusal worded for the model or
//! person that made the call (it comes back as the tool's error result,
//! never as a protocol error: a client shows those opaquely, if at all).

use serde_json::{Map, Value};

/// Why a call's arguments are refused: the error result's text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refused(pub(crate) String);

/// The string argument `key`, which is required.
pub(crate) fn string<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, Refused> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| Refused(format!("Error: `{key}` is required (a string).")))
}

/// The argument `key`, any JSON value, which is required (`null` counts).
pub(crate) fn any<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a Value, Refused> {
    args.get(key)
        .ok_or_else(|| Refused(format!("Error: `{key}` is required (any JSON value).")))
}

/// The object argument `key`, which is required.
pub(crate) fn object<'a>(
    args: &'a Map<String, Value>,
    key: &str,
) -> Result<&'a Map<String, Value>, Refused> {
    args.get(key)
        .and_then(Value::as_object)
        .ok_or_else(|| Refused(format!("Error: `{key}` is required (a JSON object).")))
}

/// The integer argument `key` in `1..=max`; `default` when it is absent
/// or null.
pub(crate) fn limit(
    args: &Map<String, Value>,
    key: &str,
    default: u64,
    max: u64,
) -> Result<u64, Refused> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v.as_u64().filter(|n| (1..=max).contains(n)).ok_or_else(|| {
            Refused(format!(
                "Error: `{key}` must be an integer from 1 to {max}."
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn each_refusal_names_the_argument_and_what_it_must_be() {
        let a = args(json!({"q": "x", "n": 3, "o": {"type": "t"}, "v": null, "s": 1}));
        assert_eq!(string(&a, "q"), Ok("x"));
        assert_eq!(
            string(&a, "s"),
            Err(Refused("Error: `s` is required (a string).".into()))
        );
        assert_eq!(
            string(&a, "missing").unwrap_err().0,
            "Error: `missing` is required (a string)."
        );
        assert_eq!(any(&a, "v"), Ok(&Value::Null));
        assert!(any(&a, "w").unwrap_err().0.contains("`w` is required"));
        assert_eq!(object(&a, "o").unwrap()["type"], "t");
        assert!(object(&a, "q").unwrap_err().0.contains("a JSON object"));
    }

    #[test]
    fn a_limit_is_an_integer_in_range_or_the_default() {
        let max = 20;
        for (v, want) in [
            (json!({}), Ok(5)),
            (json!({"limit": null}), Ok(5)),
            (json!({"limit": 1}), Ok(1)),
            (json!({"limit": 20}), Ok(20)),
        ] {
            assert_eq!(limit(&args(v), "limit", 5, max), want);
        }
        for v in [
            json!({"limit": 0}),
            json!({"limit": 21}),
            json!({"limit": -1}),
            json!({"limit": 2.5}),
            json!({"limit": "3"}),
        ] {
            assert_eq!(
                limit(&args(v.clone()), "limit", 5, max).unwrap_err().0,
                "Error: `limit` must be an integer from 1 to 20.",
                "{v}"
            );
        }
    }
}
