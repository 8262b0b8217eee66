//! The leading members of a provider request (`model`, the answer's token
//! limit, streaming, extra parameters) and the rules each provider's API
//! documents for them, in one table per provider.
//!
//! Extra parameters are checked before anything is sent: a name the
//! provider does not know, a value of the wrong type, a name the server
//! writes itself, or a pair the model refuses is a [`ParamError`] naming the
//! field. The other provider's name for the same thing is mapped, keeping
//! the caller's value: OpenAI's `stop` is Anthropic's `stop_sequences`, and
//! OpenAI's deprecated `max_tokens` is its `max_completion_tokens`
//! (sending both is refused by OpenAI).

use std::fmt;

use serde_json::Value;

use crate::Format;
use crate::render::cache::CachePolicy;
use crate::render::request::CurrentRequest;

mod member;
mod shapes;
pub(crate) use member::{Member, Param, Text};
use shapes::{anthropic_tool_choice, anthropic_tools, openai_tool_choice, openai_tools};

/// Everything a request body is built from besides the replay: its format,
/// leading fields ([`request_fields`], or `""` for the contract's body),
/// system prompt, current request, and prompt-cache breakpoints (Anthropic
/// only). See [`Replay::render_request_with`](crate::Replay::render_request_with).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RequestSpec<'a> {
    /// The body format.
    pub format: Format,
    /// JSON members written first in the object (no braces, no trailing
    /// comma), e.g. from [`request_fields`].
    pub fields: &'a str,
    /// The system prompt ([`system_prompt`](crate::system_prompt)).
    pub system: &'a str,
    /// The live request.
    pub current: CurrentRequest<'a>,
    /// Prompt-cache breakpoints: `Some` places them (Anthropic bodies).
    pub cache: Option<CachePolicy>,
    /// The recall message's text (as the search module's `recall_text`
    /// writes it), written
    /// just before the current request, after the facts message.
    pub recall: Option<&'a str>,
}

impl<'a> RequestSpec<'a> {
    /// The contract's body: no leading fields, no breakpoints.
    pub fn new(format: Format, system: &'a str, current: CurrentRequest<'a>) -> Self {
        RequestSpec {
            format,
            fields: "",
            system,
            current,
            cache: None,
            recall: None,
        }
    }

    /// With these leading fields.
    pub fn with_fields(mut self, fields: &'a str) -> Self {
        self.fields = fields;
        self
    }

    /// With prompt-cache breakpoints placed by `policy`.
    pub fn with_cache(mut self, policy: CachePolicy) -> Self {
        self.cache = Some(policy);
        self
    }

    /// With a recall message (see [`RequestSpec::recall`]).
    pub fn with_recall(mut self, recall: Option<&'a str>) -> Self {
        self.recall = recall;
        self
    }
}

/// Members a caller may not set: the body writes them itself.
pub const RESERVED_PARAMS: &[&str] = &["messages", "system", "model", "stream"];

/// Why a parameter was refused: the field, as the caller named it, and
/// what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError {
    /// The field as the caller wrote it.
    pub field: String,
    /// What is wrong, in a sentence that names the field.
    pub message: String,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ParamError {}

fn refuse(field: &str, message: String) -> ParamError {
    ParamError {
        field: field.to_string(),
        message,
    }
}

/// The JSON type a parameter takes.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Number,
    Integer,
    String,
    Bool,
    Object,
    Array,
    Strings,
    /// A string, or an array of at most 4 strings (OpenAI's `stop`).
    UpToFourStrings,
    /// Checked by a function of its own (tools and tool choices), which
    /// the text describes.
    Shaped(fn(&Value) -> bool, &'static str),
    Any,
}

impl Kind {
    fn accepts(self, v: &Value) -> bool {
        let strings = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        match self {
            Kind::Number => v.is_number(),
            Kind::Integer => v.is_u64() || v.is_i64(),
            Kind::String => v.is_string(),
            Kind::Bool => v.is_boolean(),
            Kind::Object => v.is_object(),
            Kind::Array => v.is_array(),
            Kind::Strings => strings(v),
            Kind::UpToFourStrings => {
                v.is_string() || strings(v) && v.as_array().is_some_and(|a| a.len() <= 4)
            }
            Kind::Shaped(check, _) => check(v),
            Kind::Any => true,
        }
    }

    /// [`accepts`](Self::accepts) for a member: text is checked by its
    /// skeleton where the kind is a shape (tools), else parsed.
    fn accepts_member(self, m: Member<'_>) -> bool {
        match (self, m) {
            (_, Member::Tree(v)) => self.accepts(v),
            (Kind::Any, Member::Raw(_)) => true,
            (Kind::Shaped(check, _), Member::Raw(t)) => check(&t.skeleton),
            (_, raw) => self.accepts(&raw.value()),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Number => "a number",
            Kind::Integer => "an integer",
            Kind::String => "a string",
            Kind::Bool => "true or false",
            Kind::Object => "an object",
            Kind::Array => "an array",
            Kind::Strings => "an array of strings",
            Kind::UpToFourStrings => "a string or an array of at most 4 strings",
            Kind::Shaped(_, what) => what,
            Kind::Any => "any JSON value",
        }
    }
}

/// One provider's table: the parameters its API takes, and the other
/// provider's names it maps.
struct Rules {
    provider: &'static str,
    /// The name of the answer's token limit in this API.
    limit: &'static str,
    params: &'static [(&'static str, Kind)],
    /// (the caller's name, this API's name).
    renamed: &'static [(&'static str, &'static str)],
}

/// Anthropic Messages (`POST /v1/messages`).
const ANTHROPIC: Rules = Rules {
    provider: "Anthropic",
    limit: "max_tokens",
    params: &[
        ("max_tokens", Kind::Integer),
        ("metadata", Kind::Object),
        ("stop_sequences", Kind::Strings),
        ("temperature", Kind::Number),
        ("top_p", Kind::Number),
        ("top_k", Kind::Integer),
        (
            "tools",
            Kind::Shaped(
                anthropic_tools,
                "an array of tools (each with a name of 1-64 letters, digits, _ or -, and an input_schema of type object, or a type)",
            ),
        ),
        (
            "tool_choice",
            Kind::Shaped(
                anthropic_tool_choice,
                "an object of type auto, any, none, or tool with a name",
            ),
        ),
        ("thinking", Kind::Object),
        ("service_tier", Kind::String),
        ("container", Kind::Any),
        ("mcp_servers", Kind::Array),
        ("context_management", Kind::Object),
        ("output_config", Kind::Object),
        ("output_format", Kind::Object),
        ("inference_geo", Kind::String),
        ("cache_control", Kind::Object),
        ("diagnostics", Kind::Object),
        ("speed", Kind::String),
        ("user_profile_id", Kind::String),
        ("workspace_id", Kind::String),
    ],
    renamed: &[
        ("stop", "stop_sequences"),
        ("max_completion_tokens", "max_tokens"),
    ],
};

/// OpenAI Chat Completions (`POST /v1/chat/completions`).
const OPENAI: Rules = Rules {
    provider: "OpenAI",
    limit: "max_completion_tokens",
    params: &[
        ("max_completion_tokens", Kind::Integer),
        ("audio", Kind::Object),
        ("frequency_penalty", Kind::Number),
        ("logit_bias", Kind::Object),
        ("logprobs", Kind::Bool),
        ("metadata", Kind::Object),
        ("modalities", Kind::Strings),
        ("n", Kind::Integer),
        ("parallel_tool_calls", Kind::Bool),
        ("prediction", Kind::Object),
        ("presence_penalty", Kind::Number),
        ("prompt_cache_key", Kind::String),
        ("prompt_cache_retention", Kind::String),
        ("reasoning_effort", Kind::String),
        ("response_format", Kind::Object),
        ("safety_identifier", Kind::String),
        ("seed", Kind::Integer),
        ("service_tier", Kind::String),
        ("stop", Kind::UpToFourStrings),
        ("store", Kind::Bool),
        ("stream_options", Kind::Object),
        ("temperature", Kind::Number),
        (
            "tool_choice",
            Kind::Shaped(
                openai_tool_choice,
                "\"none\", \"auto\", \"required\", or an object of type function, custom or allowed_tools",
            ),
        ),
        (
            "tools",
            Kind::Shaped(
                openai_tools,
                "an array of function or custom tools, each with a name of 1-64 letters, digits, _ or -",
            ),
        ),
        ("top_logprobs", Kind::Integer),
        ("top_p", Kind::Number),
        ("user", Kind::String),
        ("verbosity", Kind::String),
        ("web_search_options", Kind::Object),
    ],
    renamed: &[
        ("max_tokens", "max_completion_tokens"),
        ("stop_sequences", "stop"),
    ],
};

fn rules(format: Format) -> Option<&'static Rules> {
    match format {
        Format::Anthropic => Some(&ANTHROPIC),
        Format::OpenAi => Some(&OPENAI),
        _ => None,
    }
}

/// Whether an Anthropic model refuses `temperature` together with `top_p`:
/// Claude Opus 4.1 and every model from the 4.5 generation on do; Claude 3
/// and the first Claude 4 models (`claude-sonnet-4-20250514`) take both. A
/// name that is not a Claude model id is not judged.
fn refuses_both_samplers(model: &str) -> bool {
    let Some(rest) = model.strip_prefix("claude-") else {
        return false;
    };
    let mut parts = rest.split(['-', '@']);
    let family = parts.next().unwrap_or("");
    if !matches!(family, "opus" | "sonnet" | "haiku") {
        // `claude-3-5-sonnet-…` and other older forms.
        return false;
    }
    let major: u32 = match parts.next().and_then(|p| p.parse().ok()) {
        Some(m) => m,
        None => return false,
    };
    // A minor version is one or two digits; a date (`20250514`) is not one.
    let minor: u32 = match parts.next() {
        Some(p) if p.len() <= 2 => p.parse().unwrap_or(0),
        _ => 0,
    };
    major > 4 || (major == 4 && minor >= 1)
}

/// Parses `params` given as the text of one JSON object (what the
/// packages receive) into its members, in order.
///
/// ```
/// let params = wmreplay::parse_params(r#"{"temperature":0.2,"stop":["END"]}"#)?;
/// assert_eq!(params[0].0, "temperature");
/// assert!(wmreplay::parse_params("[1]").is_err());
/// # Ok::<(), wmreplay::ParamError>(())
/// ```
pub fn parse_params(json: &str) -> Result<Vec<(String, Value)>, ParamError> {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(m)) => Ok(m.into_iter().collect()),
        Ok(_) => Err(refuse("params", "`params` must be a JSON object".into())),
        Err(e) => Err(refuse("params", format!("`params` is not JSON: {e}"))),
    }
}

/// Checks `params` against the provider's table (the body's `format`:
/// anthropic or openai) for `model`, and gives them back under the
/// provider's names, in order, with the caller's values.
///
/// Refused: a reserved name (`messages`, `system`, `model`, `stream`); a
/// name the provider's API does not take, unless it is in `allow`; a value
/// of the wrong JSON type; a name given twice under both providers' names;
/// `stream_options` when not streaming, or turning usage off; and, for the
/// Anthropic models that refuse it, `temperature` with `top_p`.
///
/// ```
/// use wmreplay::{Format, check_params, parse_params};
///
/// let params = parse_params(r#"{"max_tokens":50,"stop_sequences":["END"]}"#)?;
/// let checked = check_params(Format::OpenAi, "gpt-5.5", false, &params, &[])?;
/// assert_eq!(checked[0].0, "max_completion_tokens");
/// assert_eq!(checked[1].0, "stop");
///
/// let both = parse_params(r#"{"temperature":0.5,"top_p":0.9}"#)?;
/// let e = check_params(Format::Anthropic, "claude-sonnet-5-5", false, &both, &[]).unwrap_err();
/// assert_eq!(e.field, "top_p");
/// # Ok::<(), wmreplay::ParamError>(())
/// ```
pub fn check_params(
    format: Format,
    model: &str,
    stream: bool,
    params: &[(String, Value)],
    allow: &[String],
) -> Result<Vec<(String, Value)>, ParamError> {
    let refs: Vec<(&str, Member<'_>)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), Member::Tree(v)))
        .collect();
    let checked = checked(format, model, stream, &refs, allow)?;
    Ok(checked
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.value().into_owned()))
        .collect())
}

/// [`check_params`] without a copy of the values: each under the name the
/// provider's API gives it.
fn checked<'a>(
    format: Format,
    model: &str,
    stream: bool,
    params: &[(&'a str, Member<'a>)],
    allow: &[String],
) -> Result<Vec<(&'a str, Member<'a>)>, ParamError> {
    let Some(rules) = rules(format) else {
        return Err(refuse(
            "params",
            format!(
                "request parameters go in anthropic or openai bodies, not {}",
                format.name()
            ),
        ));
    };
    let mut out: Vec<(&'a str, Member<'a>)> = Vec::with_capacity(params.len());
    // For each member of `out`, the name the caller gave it.
    let mut given: Vec<&str> = Vec::with_capacity(params.len());
    for &(name, value) in params {
        if RESERVED_PARAMS.contains(&name) {
            return Err(refuse(
                name,
                format!("`{name}` may not be set in params: the request writes it"),
            ));
        }
        let mapped = rules
            .renamed
            .iter()
            .find(|&&(from, _)| from == name)
            .map_or(name, |&(_, to)| to);
        let called = if mapped == name {
            format!("`{name}`")
        } else {
            format!("`{name}` ({}'s `{mapped}`)", rules.provider)
        };
        match rules.params.iter().find(|(n, _)| *n == mapped) {
            Some((_, kind)) if !kind.accepts_member(value) => {
                return Err(refuse(
                    name,
                    format!("{called} must be {}, got {}", kind.name(), value.value()),
                ));
            }
            Some(_) => {}
            None if allow.iter().any(|a| a == name) => {}
            None => {
                return Err(refuse(
                    name,
                    format!(
                        "`{name}` is not a parameter of {}'s API (allow it with --allow-param \
                         {name} if it is new)",
                        rules.provider
                    ),
                ));
            }
        }
        if let Some(i) = out.iter().position(|&(n, _)| n == mapped) {
            return Err(refuse(
                name,
                format!("{called} is given twice (also as `{}`)", given[i]),
            ));
        }
        out.push((mapped, value));
        given.push(name);
    }
    if let Some(i) = out.iter().position(|&(n, _)| n == "stream_options") {
        let field = given[i];
        if !stream {
            return Err(refuse(
                field,
                "`stream_options` is only valid on a streamed request (\"stream\": true)".into(),
            ));
        }
        if out[i].1.value().get("include_usage") == Some(&Value::Bool(false)) {
            return Err(refuse(
                field,
                "`stream_options.include_usage` may not be false: the answer's token usage is \
                 recorded"
                    .into(),
            ));
        }
    }
    if format == Format::Anthropic && refuses_both_samplers(model) {
        let t = out.iter().position(|&(n, _)| n == "temperature");
        let p = out.iter().position(|&(n, _)| n == "top_p");
        if let (Some(t), Some(p)) = (t, p) {
            return Err(refuse(
                given[t.max(p)],
                format!("{model} takes `temperature` or `top_p`, not both: drop one of them"),
            ));
        }
    }
    Ok(out)
}

/// The JSON members written first in a request body: `model`, the
/// answer's token limit (`max_tokens` for Anthropic,
/// `max_completion_tokens` for OpenAI), streaming (with usage asked for,
/// for OpenAI), then `params` after [`check_params`]; a parameter replaces
/// a default of the same name in its place (OpenAI's `stream_options`
/// keeps `include_usage: true`).
///
/// ```
/// use wmreplay::{Format, parse_params, request_fields};
///
/// let params = parse_params(r#"{"temperature":0.2}"#)?;
/// let fields = request_fields(Format::Anthropic, "claude-opus-4-5", 1024, false, &params, &[])?;
/// assert_eq!(fields, r#""model":"claude-opus-4-5","max_tokens":1024,"temperature":0.2"#);
/// # Ok::<(), wmreplay::ParamError>(())
/// ```
pub fn request_fields(
    format: Format,
    model: &str,
    max_output_tokens: u32,
    stream: bool,
    params: &[(String, Value)],
    allow: &[String],
) -> Result<String, ParamError> {
    let refs: Vec<(&str, Member<'_>)> = params
        .iter()
        .map(|(k, v)| (k.as_str(), Member::Tree(v)))
        .collect();
    request_fields_of(format, model, max_output_tokens, stream, &refs, allow)
}

/// [`request_fields`] over borrowed parameters: a client's tools and system
/// (tens of KB) are written once, never copied; a member given as text is
/// written as it came.
pub(crate) fn request_fields_of(
    format: Format,
    model: &str,
    max_output_tokens: u32,
    stream: bool,
    params: &[(&str, Member<'_>)],
    allow: &[String],
) -> Result<String, ParamError> {
    let params = checked(format, model, stream, params, allow)?;
    let rules = rules(format).expect("check_params refuses other formats");
    // The server's own members (and OpenAI's `stream_options` with usage
    // asked for), then the parameters, each replacing one of the same name.
    let model = Value::String(model.into());
    let limit = Value::from(max_output_tokens);
    let yes = Value::Bool(true);
    let usage;
    let mut members: Vec<(&str, Member<'_>)> = vec![
        ("model", Member::Tree(&model)),
        (rules.limit, Member::Tree(&limit)),
    ];
    if stream {
        members.push(("stream", Member::Tree(&yes)));
        if format == Format::OpenAi {
            usage = serde_json::json!({"include_usage": true});
            members.push(("stream_options", Member::Tree(&usage)));
        }
    }
    let options = params
        .iter()
        .find(|&&(k, _)| k == "stream_options")
        .and_then(|(_, v)| match v.value().into_owned() {
            Value::Object(mut o) => {
                o.insert("include_usage".into(), Value::Bool(true));
                Some(Value::Object(o))
            }
            _ => None,
        });
    for &(k, v) in &params {
        let v = match (k, &options) {
            ("stream_options", Some(o)) => Member::Tree(o),
            _ => v,
        };
        match members.iter_mut().find(|(name, _)| *name == k) {
            Some(m) => m.1 = v,
            None => members.push((k, v)),
        }
    }
    let mut s = Vec::new();
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 {
            s.push(b',');
        }
        serde_json::to_writer(&mut s, k).expect("a string is written");
        s.push(b':');
        v.write(&mut s);
    }
    Ok(String::from_utf8(s).expect("serde_json writes UTF-8 and members are valid JSON text"))
}

#[cfg(test)]
mod tests;
