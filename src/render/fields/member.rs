//! A parameter's value as the request carries it: a tree, or JSON text kept
//! as the client sent it. A client's `tools` (tens of KB of descriptions and
//! schemas in an agent's every request) stay text: their shape is checked by
//! reading only the members the checks name, and they are written upstream
//! as they came, never built into a tree or serialized again.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// One parameter's value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Member<'a> {
    Tree(&'a Value),
    /// Valid JSON text, written verbatim.
    Raw(&'a Text),
}

impl<'a> Member<'a> {
    /// The value as a tree (text is parsed: for the few checks that read
    /// a whole value, and error messages).
    pub(crate) fn value(self) -> Cow<'a, Value> {
        match self {
            Member::Tree(v) => Cow::Borrowed(v),
            Member::Raw(t) => Cow::Owned(serde_json::from_str(t.raw.get()).unwrap_or(Value::Null)),
        }
    }

    /// Appends the value's JSON to `out`.
    pub(crate) fn write(self, out: &mut Vec<u8>) {
        match self {
            Member::Tree(v) => serde_json::to_writer(out, v).expect("a JSON value is written"),
            Member::Raw(t) => out.extend_from_slice(t.raw.get().as_bytes()),
        }
    }
}

/// A member of a client's request as read: a tree, or its text where only
/// its shape is checked (`tools`).
#[derive(Debug)]
pub(crate) enum Param {
    Tree(Value),
    Raw(Text),
}

/// A member kept as the client's text, with its [`skeleton`] read once
/// (what every check of it reads).
#[derive(Debug)]
pub(crate) struct Text {
    pub(crate) raw: Box<RawValue>,
    pub(crate) skeleton: Value,
}

impl Text {
    pub(crate) fn new(raw: Box<RawValue>) -> Text {
        let skeleton = skeleton(&raw).unwrap_or(Value::Null);
        Text { raw, skeleton }
    }
}

impl Param {
    pub(crate) fn member(&self) -> Member<'_> {
        match self {
            Param::Tree(v) => Member::Tree(v),
            Param::Raw(t) => Member::Raw(t),
        }
    }

    /// The tree, for a member read as one (every member but `tools`).
    pub(crate) fn tree(&self) -> Option<&Value> {
        match self {
            Param::Tree(v) => Some(v),
            Param::Raw(_) => None,
        }
    }
}

/// What a check of tools reads of `raw`: each object's `type` and `name`,
/// and those of its `input_schema`, `function` and `custom` objects, in
/// arrays as they stand; scalars are `null`, every other member is skipped
/// unparsed. A check that passes on this passes on the whole value, and
/// fails alike (`None` when `raw` is not JSON).
fn skeleton(raw: &RawValue) -> Option<Value> {
    serde_json::from_str::<Skeleton>(raw.get())
        .ok()
        .map(|s| s.0)
}

/// See [`skeleton`].
struct Skeleton(Value);

/// The members a skeleton keeps whole (small: a type or a name).
const KEPT: [&str; 2] = ["type", "name"];
/// The members a skeleton descends into.
const NESTED: [&str; 3] = ["input_schema", "function", "custom"];

impl<'de> Deserialize<'de> for Skeleton {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkeletonVisitor)
    }
}

struct SkeletonVisitor;

impl<'de> Visitor<'de> for SkeletonVisitor {
    type Value = Skeleton;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skeleton, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if KEPT.contains(&key.as_ref()) {
                let v: Value = map.next_value()?;
                out.insert(key.into_owned(), v);
            } else if NESTED.contains(&key.as_ref()) {
                let v: Skeleton = map.next_value()?;
                out.insert(key.into_owned(), v.0);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Skeleton(Value::Object(out)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skeleton, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Skeleton>()? {
            out.push(v.0);
        }
        Ok(Skeleton(Value::Array(out)))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Skeleton, E> {
        Ok(Skeleton(Value::Null))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Skeleton, E> {
        Ok(Skeleton(Value::Null))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Skeleton, E> {
        Ok(Skeleton(Value::Null))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Skeleton, E> {
        Ok(Skeleton(Value::Null))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Skeleton, E> {
        Ok(Skeleton(Value::Null))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Skeleton, E> {
        Ok(Skeleton(Value::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Skeleton, E> {
        Ok(Skeleton(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.into()).unwrap()
    }

    #[test]
    fn a_skeleton_keeps_what_the_checks_read_and_nothing_else() {
        let tools = r#"[{"name":"Read","description":"reads a file","input_schema":
            {"type":"object","properties":{"path":{"type":"string","name":"deep"}}}},
            {"type":"function","function":{"name":"f","parameters":{"type":"object"}}},
            "text", 7, null, [1, {"name": "n"}]]"#;
        let s = skeleton(&raw(tools)).unwrap();
        assert_eq!(
            s,
            serde_json::json!([
                {"name": "Read", "input_schema": {"type": "object"}},
                {"type": "function", "function": {"name": "f"}},
                null, null, null, [null, {"name": "n"}]
            ])
        );
        assert_eq!(skeleton(&raw("{}")).unwrap(), serde_json::json!({}));
        assert_eq!(skeleton(&raw("\"x\"")).unwrap(), Value::Null);
    }

    #[test]
    fn a_member_writes_its_text_as_given() {
        let r = Text::new(raw("[ {\"b\":1, \"a\" : 2} ]"));
        let mut out = Vec::new();
        Member::Raw(&r).write(&mut out);
        assert_eq!(out, b"[ {\"b\":1, \"a\" : 2} ]");
        assert_eq!(
            Member::Raw(&r).value().into_owned(),
            serde_json::json!([{"b": 1, "a": 2}])
        );
        let v = serde_json::json!({"k": [1, 2]});
        out.clear();
        Member::Tree(&v).write(&mut out);
        assert_eq!(out, br#"{"k":[1,2]}"#);
    }
}
