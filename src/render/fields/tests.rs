//! Unit tests of the providers' request rules.
#![cfg(test)]

use super::*;

fn p(json: &str) -> Vec<(String, Value)> {
    parse_params(json).unwrap()
}

fn check(format: Format, model: &str, stream: bool, json: &str) -> Result<String, ParamError> {
    request_fields(format, model, 100, stream, &p(json), &[])
}

#[test]
fn openai_names_of_anthropic_fields_are_mapped_with_their_values() {
    assert_eq!(
        check(
            Format::OpenAi,
            "gpt-5",
            false,
            r#"{"max_tokens":50,"stop_sequences":["E"]}"#
        )
        .unwrap(),
        r#""model":"gpt-5","max_completion_tokens":50,"stop":["E"]"#
    );
    assert_eq!(
        check(
            Format::Anthropic,
            "claude-opus-4-5",
            false,
            r#"{"stop":["E"],"max_completion_tokens":7}"#
        )
        .unwrap(),
        r#""model":"claude-opus-4-5","max_tokens":7,"stop_sequences":["E"]"#
    );
}

#[test]
fn both_names_of_one_field_are_refused() {
    let e = check(
        Format::OpenAi,
        "gpt-5",
        false,
        r#"{"max_completion_tokens":5,"max_tokens":50}"#,
    )
    .unwrap_err();
    assert_eq!(e.field, "max_tokens");
    assert!(e.message.contains("twice"), "{e}");
}

#[test]
fn stream_options_only_when_streaming_and_never_without_usage() {
    let e = check(Format::OpenAi, "gpt-5", false, r#"{"stream_options":{}}"#).unwrap_err();
    assert_eq!(e.field, "stream_options");
    let e = check(
        Format::OpenAi,
        "gpt-5",
        true,
        r#"{"stream_options":{"include_usage":false}}"#,
    )
    .unwrap_err();
    assert!(e.message.contains("include_usage"), "{e}");
    assert_eq!(
        check(
            Format::OpenAi,
            "gpt-5",
            true,
            r#"{"stream_options":{"include_obfuscation":false}}"#
        )
        .unwrap(),
        r#""model":"gpt-5","max_completion_tokens":100,"stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true}"#
    );
    // Anthropic has no such parameter.
    assert!(
        check(
            Format::Anthropic,
            "claude-opus-4-5",
            true,
            r#"{"stream_options":{}}"#
        )
        .is_err()
    );
}

#[test]
fn the_sampler_pair_is_refused_for_the_models_that_refuse_it() {
    let both = r#"{"temperature":0.5,"top_p":0.9}"#;
    for m in [
        "claude-sonnet-4-5",
        "claude-sonnet-4-5-20250929",
        "claude-opus-4-1",
        "claude-haiku-4-5@20251001",
        "claude-opus-4-7",
        "claude-sonnet-5",
    ] {
        let e = check(Format::Anthropic, m, false, both).unwrap_err();
        assert_eq!(e.field, "top_p", "{m}");
    }
    for m in [
        "claude-sonnet-4-20250514",
        "claude-opus-4-0",
        "claude-3-7-sonnet-20250219",
        "my-proxy-model",
    ] {
        assert!(check(Format::Anthropic, m, false, both).is_ok(), "{m}");
    }
    // Either one alone is fine, and OpenAI takes both.
    assert!(
        check(
            Format::Anthropic,
            "claude-sonnet-4-5",
            false,
            r#"{"top_p":0.9}"#
        )
        .is_ok()
    );
    assert!(check(Format::OpenAi, "gpt-5", false, both).is_ok());
}

#[test]
fn unknown_reserved_and_mistyped_fields_are_refused_by_name() {
    let e = check(Format::Anthropic, "m", false, r#"{"frequency_penalty":1}"#).unwrap_err();
    assert_eq!(e.field, "frequency_penalty");
    assert!(e.message.contains("Anthropic"), "{e}");
    let e = check(Format::OpenAi, "m", false, r#"{"model":"x"}"#).unwrap_err();
    assert_eq!(e.field, "model");
    let e = check(Format::OpenAi, "m", false, r#"{"temperature":"hot"}"#).unwrap_err();
    assert!(e.message.contains("must be a number"), "{e}");
    let e = check(
        Format::OpenAi,
        "m",
        false,
        r#"{"stop":["a","b","c","d","e"]}"#,
    )
    .unwrap_err();
    assert!(e.message.contains("at most 4"), "{e}");
    let e = check(Format::Anthropic, "m", false, r#"{"stop":"END"}"#).unwrap_err();
    assert_eq!(e.field, "stop");
    assert!(e.message.contains("stop_sequences"), "{e}");
    // An operator may allow a parameter newer than this table.
    let allowed = request_fields(
        Format::Anthropic,
        "m",
        5,
        false,
        &p(r#"{"brand_new":{"x":1}}"#),
        &["brand_new".to_string()],
    )
    .unwrap();
    assert!(allowed.ends_with(r#""brand_new":{"x":1}"#));
    assert!(check(Format::Ndjson, "m", false, "{}").is_err());
}

#[test]
fn nested_members_keep_their_order() {
    assert_eq!(
        check(
            Format::Anthropic,
            "m",
            false,
            r#"{"metadata":{"z":1,"a":2}}"#
        )
        .unwrap(),
        r#""model":"m","max_tokens":100,"metadata":{"z":1,"a":2}"#
    );
}

/// Tools given as text are accepted or refused exactly as the same tools
/// as a tree, with the same message, and written as they came.
#[test]
fn tools_as_text_are_judged_as_their_tree_is() {
    let cases = [
        r#"[{"name":"t","description":"d","input_schema":{"type":"object"}}]"#,
        r#"[{"name":"t","input_schema":{"type":"array"}}]"#,
        r#"[{"name":"t","input_schema":"object"}]"#,
        r#"[{"type":"custom","name":"t","input_schema":{"type":"object","properties":{"name":{"type":"x"}}}}]"#,
        r#"[{"type":"web_search_20250305","name":"web_search","input_schema":7}]"#,
        r#"[{"type":"bash_20250124","name":null}]"#,
        r#"[{"type":null,"name":"t","input_schema":{"type":"object"}}]"#,
        r#"[{"name":"bad name!","input_schema":{"type":"object"}}]"#,
        r#"[{"name":"","input_schema":{"type":"object"}}]"#,
        r#"[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]"#,
        r#"[{"type":"function","function":"f"}]"#,
        r#"[{"type":"function","function":{"name":"f g"}}]"#,
        r#"[{"type":"custom","custom":{"name":"c"}}]"#,
        r#"[{"type":"custom","name":"c"}]"#,
        r#"[{"type":"function","name":"f"}]"#,
        r#"[["name"],{"name":"t"}]"#,
        r#"["t"]"#,
        r#"[]"#,
        r#"{"name":"t","input_schema":{"type":"object"}}"#,
        r#""tools""#,
        r#"null"#,
        r#"[{"name":"t","input_schema":{"type":"object"}},{"name":"u","input_schema":{}}]"#,
    ];
    for format in [Format::Anthropic, Format::OpenAi] {
        for text in cases {
            let tree: Value = serde_json::from_str(text).unwrap();
            let raw = Text::new(serde_json::value::RawValue::from_string(text.into()).unwrap());
            let of =
                |m: Member<'_>| request_fields_of(format, "m", 10, false, &[("tools", m)], &[]);
            let (t, r) = (of(Member::Tree(&tree)), of(Member::Raw(&raw)));
            match (t, r) {
                (Ok(t), Ok(r)) => {
                    assert_eq!(t, r.replace(text, &tree.to_string()), "{format:?} {text}");
                    assert!(
                        r.ends_with(&format!("\"tools\":{text}")),
                        "{format:?} {text}"
                    );
                }
                (Err(t), Err(r)) => assert_eq!(t.message, r.message, "{format:?} {text}"),
                (t, r) => panic!("{format:?} {text}: as a tree {t:?}, as text {r:?}"),
            }
        }
    }
}
