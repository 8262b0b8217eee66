//! A provider request's body read once: its members in order, each a tree
//! but `tools`, which stays the client's text (checked by its shape and
//! written upstream as it came: an agent sends tens of KB of tool
//! descriptions and schemas with every request).

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::render::fields::{Param, Text};

/// The members kept as text.
const RAW: [&str; 1] = ["tools"];

/// A body's members: the trees by name (for the reader to take what it
/// reads), and the order they came in.
pub(crate) struct Body {
    pub(crate) obj: Map<String, Value>,
    /// Each member's name in order, with its text where it is kept so.
    order: Vec<(String, Option<Text>)>,
}

impl Body {
    /// Reads `body`; what is wrong with it when it is not JSON or not an
    /// object (the caller's 400).
    pub(crate) fn read(body: &[u8]) -> Result<Body, String> {
        serde_json::from_slice::<Body>(body).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => "the body must be a JSON object".into(),
            _ => format!("the body is not valid JSON: {e}"),
        })
    }

    /// A member kept as text.
    pub(crate) fn text(&self, name: &str) -> Option<&Text> {
        self.order
            .iter()
            .find(|(k, r)| k == name && r.is_some())
            .and_then(|(_, r)| r.as_ref())
    }

    /// The members the reader left, in the order they came (a repeated
    /// name counts once, at its first place, with its last value).
    pub(crate) fn into_params(mut self) -> Vec<(String, Param)> {
        let mut out = Vec::with_capacity(self.order.len());
        for (k, raw) in self.order {
            match raw {
                Some(r) => out.push((k, Param::Raw(r))),
                None => {
                    if let Some(v) = self.obj.remove(&k) {
                        out.push((k, Param::Tree(v)));
                    }
                }
            }
        }
        out
    }
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(BodyVisitor)
    }
}

struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = Body;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Body, A::Error> {
        let mut body = Body {
            obj: Map::new(),
            order: Vec::new(),
        };
        while let Some(k) = map.next_key::<String>()? {
            if RAW.contains(&k.as_str()) {
                let r = Text::new(map.next_value::<Box<RawValue>>()?);
                // The last of a repeated name stands, at its first place.
                match body.order.iter_mut().find(|(n, _)| *n == k) {
                    Some(slot) => slot.1 = Some(r),
                    None => body.order.push((k, Some(r))),
                }
            } else {
                let v: Value = map.next_value()?;
                if body.obj.insert(k.clone(), v).is_none() {
                    body.order.push((k, None));
                }
            }
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_keep_their_order_and_tools_their_text() {
        let body = br#"{"model":"m","tools":[ {"name":"a"} ],"max_tokens":5,"model":"n"}"#;
        let mut b = Body::read(body).unwrap();
        let tools = b.text("tools").unwrap();
        assert_eq!(tools.raw.get(), r#"[ {"name":"a"} ]"#);
        assert_eq!(tools.skeleton, serde_json::json!([{"name": "a"}]));
        assert_eq!(b.obj.remove("model"), Some(Value::from("n")));
        let params = b.into_params();
        let names: Vec<&str> = params.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["tools", "max_tokens"]);
        assert!(matches!(&params[0].1, Param::Raw(_)));
        assert_eq!(params[1].1.tree(), Some(&Value::from(5)));
    }

    #[test]
    fn a_body_that_is_not_an_object_or_not_json_is_named_so() {
        for (body, said) in [
            (&b"[1]"[..], "the body must be a JSON object"),
            (b"\"x\"", "the body must be a JSON object"),
            (b"{\"model\":", "the body is not valid JSON"),
            (b"{\"tools\":[1,}", "the body is not valid JSON"),
        ] {
            let e = Body::read(body).err().unwrap();
            assert!(
                e.starts_with(said),
                "{}: {e}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
