//! The tools an MCP client sees: their names, descriptions and input
//! schemas (flat JSON objects: no `oneOf`, `anyOf` or `allOf` at the top,
//! which several clients and model APIs refuse). `search_memory` and
//! `memory` take the schemas the server offers a model (`--recall-tool`,
//! `--memory-tool`), so one call means the same by either door.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

use crate::server::upstream::Provider;
use crate::server::upstream::tools::{MEMORY, SEARCH_MEMORY, definitions};

/// `search_memory`: the best records for a query, over the whole log.
pub(crate) const SEARCH: &str = SEARCH_MEMORY;
/// `memory`: the memory tool's six commands over `/memories`.
pub(crate) const FILES: &str = MEMORY;
/// `get_facts`: every live fact.
pub(crate) const GET_FACTS: &str = "get_facts";
/// `set_fact`: one fact written.
pub(crate) const SET_FACT: &str = "set_fact";
/// `delete_fact`: one fact deleted.
pub(crate) const DELETE_FACT: &str = "delete_fact";
/// `append_record`: one record appended.
pub(crate) const APPEND_RECORD: &str = "append_record";
/// `recent_context`: the newest summary and the newest records after it.
pub(crate) const RECENT_CONTEXT: &str = "recent_context";

/// Records `recent_context` gives without a `limit`.
pub(crate) const CONTEXT_DEFAULT: u64 = 20;
/// Most records `recent_context` may ask for.
pub(crate) const CONTEXT_MAX: u64 = 200;

const SEARCH_DESCRIPTION: &str = "Searches the whole working-memory log, older records included (those folded into a summary too), and returns the best-matching records, best first, as {\"query\",\"records\":[{\"offset\",\"record\"}]}: each record's byte offset in the log and the record as written. Use it when you need a name, number, promise or decision from the past.";

const GET_FACTS_DESCRIPTION: &str = "Reads the log's keyed facts: the latest value of every live key, as {\"facts\":{key: value}}. The memory tool's files are facts too, keyed by their path under /memories.";

const SET_FACT_DESCRIPTION: &str = "Sets one keyed fact: appends a wm_fact record {key, value} to the log, which later replays and get_facts read as the key's value. The value is any JSON (null deletes the key). Answers {\"key\",\"deleted\",\"ts_ms\",\"offset\",\"bytes\"}.";

const DELETE_FACT_DESCRIPTION: &str = "Deletes one keyed fact: appends a wm_fact record with a null value. Answers {\"key\",\"deleted\",\"ts_ms\",\"offset\",\"bytes\"}.";

const APPEND_RECORD_DESCRIPTION: &str = "Appends one record to the working-memory log (an event, an insight, a tool result): a JSON object with a string `type` and any other members. Its `ts_ms` (ms since the epoch) is set by the server when absent. Answers {\"ts_ms\",\"offset\",\"bytes\"}.";

fn context_description() -> String {
    format!(
        "What happened recently in the working-memory log: the newest summary's text (what \
         older records were folded into), or null, and the newest records replayed after it, \
         oldest first, each as {{\"offset\",\"record\"}} (a record that does not fit the answer is \
         named by its offset and size, with \"left_out\": true). \"earlier\" counts the records \
         after the summary older than those given. limit: 1 to {CONTEXT_MAX}, default \
         {CONTEXT_DEFAULT}."
    )
}

fn object(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The schema and description the server offers a model for `name`.
fn offered(name: &str) -> (Value, String) {
    let defs = definitions(Provider::OpenAi, true, true).unwrap_or_default();
    let f = defs
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| &d["function"])
        .find(|f| f["name"] == name)
        .cloned()
        .unwrap_or_default();
    let description = f["description"].as_str().unwrap_or_default().to_string();
    (f["parameters"].clone(), description)
}

fn key_schema() -> Value {
    json!({
        "type": "string",
        "description": "The fact's key: 1 to 256 bytes, no control characters."
    })
}

/// Hints for a tool that only reads the log (none reaches beyond it).
fn reads(title: &str) -> ToolAnnotations {
    ToolAnnotations::from_raw(Some(title.into()), Some(true), None, None, Some(false))
}

/// Hints for a tool that appends to the log.
fn writes(title: &str, destructive: bool, idempotent: bool) -> ToolAnnotations {
    ToolAnnotations::from_raw(
        Some(title.into()),
        Some(false),
        Some(destructive),
        Some(idempotent),
        Some(false),
    )
}

/// Every tool, in the order they are listed.
pub(crate) fn all() -> Vec<Tool> {
    let (search_schema, _) = offered(SEARCH);
    let (memory_schema, memory_description) = offered(FILES);
    vec![
        Tool::new(SEARCH, SEARCH_DESCRIPTION, object(search_schema))
            .with_annotations(reads("Search memory")),
        Tool::new(FILES, memory_description, object(memory_schema)).with_annotations(writes("Memory files (/memories)", true, false)),
        Tool::new(
            GET_FACTS,
            GET_FACTS_DESCRIPTION,
            object(json!({"type": "object", "properties": {}})),
        )
        .with_annotations(reads("Read the facts")),
        Tool::new(
            SET_FACT,
            SET_FACT_DESCRIPTION,
            object(json!({
                "type": "object",
                "properties": {
                    "key": key_schema(),
                    "value": {"description": "The fact's value: any JSON (null deletes the key)."}
                },
                "required": ["key", "value"]
            })),
        )
        .with_annotations(writes("Set a fact", true, true)),
        Tool::new(
            DELETE_FACT,
            DELETE_FACT_DESCRIPTION,
            object(json!({
                "type": "object",
                "properties": {"key": key_schema()},
                "required": ["key"]
            })),
        )
        .with_annotations(writes("Delete a fact", true, true)),
        Tool::new(
            APPEND_RECORD,
            APPEND_RECORD_DESCRIPTION,
            object(json!({
                "type": "object",
                "properties": {
                    "record": {
                        "type": "object",
                        "description": "The record: a JSON object with a string `type`; `ts_ms` a number, or absent.",
                        "properties": {"type": {"type": "string"}, "ts_ms": {"type": "number"}},
                        "required": ["type"]
                    }
                },
                "required": ["record"]
            })),
        )
        .with_annotations(writes("Append a record", false, false)),
        Tool::new(
            RECENT_CONTEXT,
            context_description(),
            object(json!({
                "type": "object",
                "properties": {
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": CONTEXT_MAX,
                        "description": format!("How many of the newest records to return (default {CONTEXT_DEFAULT}).")
                    }
                }
            })),
        )
        .with_annotations(reads("Recent context")),
    ]
}

/// The tool named `name`.
pub(crate) fn named(name: &str) -> Option<Tool> {
    all().into_iter().find(|t| t.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_is_a_flat_object() {
        let tools = all();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                SEARCH,
                FILES,
                GET_FACTS,
                SET_FACT,
                DELETE_FACT,
                APPEND_RECORD,
                RECENT_CONTEXT
            ]
        );
        for t in &tools {
            let s = &t.input_schema;
            assert_eq!(s.get("type"), Some(&json!("object")), "{}", t.name);
            for k in ["oneOf", "anyOf", "allOf", "$ref", "$defs"] {
                assert!(!s.contains_key(k), "{}: {k}", t.name);
            }
            assert!(s["properties"].is_object(), "{}", t.name);
            for r in s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let r = r.as_str().unwrap();
                assert!(s["properties"].get(r).is_some(), "{}: {r}", t.name);
            }
            assert!(
                t.description.as_deref().is_some_and(|d| d.len() > 40),
                "{}",
                t.name
            );
            assert!(t.annotations.is_some(), "{}", t.name);
        }
    }

    #[test]
    fn search_and_memory_take_the_schemas_a_model_is_offered() {
        for name in [SEARCH, FILES] {
            let (schema, _) = offered(name);
            assert!(schema.is_object(), "{name}");
            assert_eq!(
                Value::Object((*named(name).unwrap().input_schema).clone()),
                schema
            );
        }
        let search = named(SEARCH).unwrap();
        assert_eq!(search.input_schema["required"], json!(["query"]));
        assert_eq!(search.input_schema["properties"]["limit"]["maximum"], 20);
        // A client's search leaves nothing out: no talk of a conversation.
        assert!(!search.description.unwrap().contains("conversation"));
        let memory = named(FILES).unwrap();
        assert_eq!(
            memory.input_schema["properties"]["command"]["enum"],
            json!([
                "view",
                "create",
                "str_replace",
                "insert",
                "delete",
                "rename"
            ])
        );
        assert!(named("nope").is_none());
    }
}
