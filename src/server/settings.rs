//! The server's settings, parsed and checked: every duration and size has
//! a documented range, so no setting can overflow a timer or a buffer once
//! the server runs. The command line parses its flags with these functions,
//! and [`Config::validate`] checks a configuration built in code.

use std::time::Duration;

use serde_json::Value;

use super::config::Config;

/// The longest timeout accepted (header, body, upstream, write, keep-alive,
/// shutdown).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);
/// The longest an idempotency key may be remembered.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 86_400);
/// The largest request body accepted.
pub const MAX_BODY_LIMIT: u64 = 1 << 30;
/// The most replays (and upstream calls) at once.
pub const MAX_CONCURRENT: usize = 65_536;
/// The most open connections at once.
pub const MAX_CONNECTIONS: usize = 1_000_000;
/// The most retries of an upstream call.
pub const MAX_RETRIES: u32 = 10;

/// A duration: plain seconds (`30`) or with units (`500ms`, `2m`, `1h 30m`),
/// more than zero and at most `max`.
pub fn parse_duration(s: &str, max: Duration) -> Result<Duration, String> {
    let t = s.trim();
    let d = match t.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(t)
            .map_err(|e| format!("{s:?} is not a duration ({e}); e.g. 30, 30s, 500ms, 5m"))?,
    };
    check_duration(s, d, max)
}

fn check_duration(what: &str, d: Duration, max: Duration) -> Result<Duration, String> {
    if d > max {
        return Err(format!(
            "{what:?} is longer than the limit, {}",
            humantime::format_duration(max)
        ));
    }
    if d.is_zero() {
        return Err(format!("{what:?}: a duration must be more than zero"));
    }
    Ok(d)
}

/// A timeout, at most [`MAX_TIMEOUT`].
pub fn parse_timeout(s: &str) -> Result<Duration, String> {
    parse_duration(s, MAX_TIMEOUT)
}

/// How long an idempotency key is remembered, at most [`MAX_TTL`].
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    parse_duration(s, MAX_TTL)
}

/// A size such as `1MiB`, `64k` or `1048576`, at most `max` bytes.
pub fn parse_size(s: &str, max: u64) -> Result<u64, String> {
    let n = crate::corpus::parse_size(s)?;
    if n > max {
        return Err(format!("{s:?} is larger than the limit, {max} bytes"));
    }
    Ok(n)
}

/// The upstream URL checked: http or https, with a host.
pub fn parse_upstream(s: &str) -> Result<reqwest::Url, String> {
    let u = reqwest::Url::parse(s).map_err(|e| {
        let hint = if !s.contains("://") {
            format!(" (did you mean https://{s}?)")
        } else {
            String::new()
        };
        format!("--upstream {s:?} is not a URL: {e}{hint}")
    })?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!(
            "--upstream {s:?}: the scheme must be http or https, not {:?}",
            u.scheme()
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(format!("--upstream {s:?} has no host"));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err(format!(
            "--upstream {s:?}: a query or fragment is not allowed"
        ));
    }
    Ok(u)
}

/// `NAME=JSON` (from `--upstream-field`), checked.
pub fn parse_field(s: &str) -> Result<(String, Value), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| {
        format!("--upstream-field {s:?}: expected NAME=JSON, e.g. temperature=0.2")
    })?;
    let k = k.trim();
    if k.is_empty() {
        return Err(format!("--upstream-field {s:?}: the name is empty"));
    }
    if crate::RESERVED_PARAMS.contains(&k) {
        return Err(format!(
            "--upstream-field {k}: the server sets `{k}` (use --model for the model)"
        ));
    }
    let v: Value = serde_json::from_str(v).map_err(|e| {
        format!("--upstream-field {k}: {v:?} is not JSON ({e}); quote a string: {k}='\"text\"'")
    })?;
    Ok((k.to_string(), v))
}

/// `NAME=VALUE` (from `--upstream-header`), checked: a valid header name
/// and value, and not one the server writes (the API key's, the body's).
pub fn parse_header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| {
        format!("--upstream-header {s:?}: expected NAME=VALUE, e.g. anthropic-beta=context-1m-2025-08-07")
    })?;
    let k = k.trim().to_ascii_lowercase();
    let v = v.trim();
    if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() || k.is_empty() {
        return Err(format!(
            "--upstream-header {s:?}: {k:?} is not a header name"
        ));
    }
    if reqwest::header::HeaderValue::from_str(v).is_err() {
        return Err(format!(
            "--upstream-header {k}: the value is not a valid header value"
        ));
    }
    const WRITTEN: &[&str] = &[
        "x-api-key",
        "authorization",
        "content-type",
        "content-length",
        "host",
        "transfer-encoding",
        "connection",
        "idempotency-key",
    ];
    if WRITTEN.contains(&k.as_str()) {
        return Err(format!(
            "--upstream-header {k}: the server writes this header (the API key comes from \
             --api-key-env)"
        ));
    }
    Ok((k, v.to_string()))
}

impl Config {
    /// Checks every setting against its range (the constants of this
    /// module) and the selection's bounds; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        for (name, d) in [
            ("--header-timeout", self.header_timeout),
            ("--body-timeout", self.body_timeout),
            ("--upstream-timeout", self.upstream_timeout),
            ("--write-timeout", self.write_timeout),
            ("--keep-alive-timeout", self.keep_alive_timeout),
            ("--shutdown-timeout", self.shutdown_timeout),
        ] {
            check_duration(name, d, MAX_TIMEOUT)?;
        }
        check_duration("--idempotency-ttl", self.idempotency_ttl, MAX_TTL)?;
        check_duration("--idle-timeout", self.idle_timeout, MAX_TTL)?;
        if self.max_record_bytes == 0 || self.max_record_bytes as u64 > MAX_BODY_LIMIT {
            return Err(format!(
                "--max-record-bytes must be between 1 and {MAX_BODY_LIMIT} bytes"
            ));
        }
        if self.max_live_bytes == 0 {
            return Err("--max-live-bytes must be at least 1 byte".into());
        }
        if let Some(t) = &self.auth_token
            && t.0.trim().is_empty()
        {
            return Err("the auth token is empty".into());
        }
        if self.forward_client_key && self.token_file.is_some() {
            return Err(
                "--forward-client-key and --token-file cannot go together: a client of the \
                 provider's API sends one key, which is either the upstream's (forwarded) or \
                 this server's access token"
                    .into(),
            );
        }
        if self.forward_client_key && self.auth_token.is_some() {
            return Err(
                "--forward-client-key and --auth-token-env cannot go together: a client of the \
                 provider's API sends one key, which is either the upstream's (forwarded) or \
                 this server's access token"
                    .into(),
            );
        }
        if self.retry_min_delay > MAX_TIMEOUT {
            return Err("the retry delay is longer than a day".into());
        }
        if self.body_limit == 0 || self.body_limit as u64 > MAX_BODY_LIMIT {
            return Err(format!(
                "--body-limit must be between 1 and {MAX_BODY_LIMIT} bytes"
            ));
        }
        if !(1..=MAX_CONCURRENT).contains(&self.max_concurrent) {
            return Err(format!(
                "--max-concurrent must be between 1 and {MAX_CONCURRENT}"
            ));
        }
        if !(1..=MAX_CONNECTIONS).contains(&self.max_connections) {
            return Err(format!(
                "--max-connections must be between 1 and {MAX_CONNECTIONS}"
            ));
        }
        if self.upstream_retries > MAX_RETRIES {
            return Err(format!("--upstream-retries must be at most {MAX_RETRIES}"));
        }
        if self.max_output_tokens == 0 {
            return Err("--max-output-tokens must be at least 1".into());
        }
        if let Some(c) = &self.compaction {
            check_compaction(self, c)?;
        }
        if let Some(k) = self.recall
            && !(1..=crate::search::MAX_LIMIT).contains(&k)
        {
            return Err(format!(
                "--recall must be 1 to {}, not {k}",
                crate::search::MAX_LIMIT
            ));
        }
        check_tools(self)?;
        if let Some(e) = &self.embed {
            e.validate()?;
        }
        #[cfg(feature = "jetstream")]
        if let Some(js) = &self.jetstream {
            if self.log_dir.is_none() {
                return Err("--jetstream needs --log-dir: its files are the logs' caches".into());
            }
            let token_ok = |t: &str| {
                !t.is_empty() && !t.contains(|c: char| c.is_whitespace() || matches!(c, '*' | '>'))
            };
            if !js.subject_prefix.split('.').all(token_ok) {
                return Err(format!(
                    "--subject-prefix {:?} is not a subject: tokens separated by '.', without \
                     spaces, '*' or '>'",
                    js.subject_prefix
                ));
            }
            if js.stream.is_empty()
                || !js
                    .stream
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            {
                return Err(format!(
                    "--stream {:?}: a stream name is letters, digits, '_' and '-'",
                    js.stream
                ));
            }
        }
        if let Some(u) = &self.upstream {
            parse_upstream(u)?;
            if self.model.as_deref().is_none_or(|m| m.trim().is_empty()) {
                return Err(
                    "--upstream needs a model: pass --model NAME or set WMREPLAY_MODEL (there \
                     is no built-in default; e.g. --model claude-sonnet-5-5 for Anthropic)"
                        .into(),
                );
            }
        }
        for (name, value) in &self.upstream_headers {
            parse_header(&format!("{name}={value}"))?;
        }
        match &self.model {
            Some(model) => {
                // Checked as a streamed request would be: `stream_options`
                // is then allowed, and a plain request refuses it per turn.
                crate::check_params(
                    self.provider.format(),
                    model,
                    true,
                    &self.upstream_fields,
                    &self.allow_params,
                )
                .map_err(|e| format!("--upstream-field {}: {}", e.field, e.message))?;
            }
            None if !self.upstream_fields.is_empty() => {
                return Err("--upstream-field needs --model (the fields go with it)".into());
            }
            None => {}
        }
        self.selection.validate()
    }
}

/// Most rounds of tool calls in one turn (`--max-tool-rounds`).
pub const MAX_TOOL_ROUNDS: u32 = 32;

/// `--recall-tool`, `--memory-tool` and `--max-tool-rounds`.
fn check_tools(cfg: &Config) -> Result<(), String> {
    let t = &cfg.tools;
    if !(1..=MAX_TOOL_ROUNDS).contains(&t.max_rounds) {
        return Err(format!(
            "--max-tool-rounds must be 1 to {MAX_TOOL_ROUNDS}, not {}",
            t.max_rounds
        ));
    }
    if !t.any() {
        return Ok(());
    }
    if cfg.upstream.is_none() {
        return Err(
            "--recall-tool and --memory-tool need --upstream: the server runs the tools the \
             model calls"
                .into(),
        );
    }
    if let Some((k, _)) = cfg
        .upstream_fields
        .iter()
        .find(|(k, _)| k == "tools" || k == "tool_choice")
    {
        return Err(format!(
            "--upstream-field {k} cannot go with --recall-tool or --memory-tool: the server \
             offers its own tools"
        ));
    }
    Ok(())
}

/// `--compact-at` and its companions.
fn check_compaction(cfg: &Config, c: &super::config::Compaction) -> Result<(), String> {
    if !cfg.selection.summaries {
        return Err("--compact-at needs --summaries: a summary is replayed only with it".into());
    }
    if cfg.upstream.is_none() {
        return Err("--compact-at needs --upstream: a model writes the summaries".into());
    }
    if c.at == 0 {
        return Err("--compact-at must be at least 1 token".into());
    }
    if !(c.to > 0.0 && c.to < 1.0) {
        return Err(format!(
            "--compact-to must be between 0 and 1 (exclusive), got {}",
            c.to
        ));
    }
    if c.max_output_tokens == 0 {
        return Err("--compact-max-output-tokens must be at least 1".into());
    }
    if c.instructions.trim().is_empty() {
        return Err("--compact-prompt: the instructions are empty".into());
    }
    if c.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        return Err("--compact-model is empty".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_take_units_and_stay_in_range() {
        assert_eq!(parse_timeout("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_timeout("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout("1h 30m"), Ok(Duration::from_secs(5400)));
        assert!(
            parse_timeout("18446744073709551615")
                .unwrap_err()
                .contains("limit")
        );
        assert!(parse_timeout("0").unwrap_err().contains("more than zero"));
        assert!(
            parse_timeout("soon")
                .unwrap_err()
                .contains("not a duration")
        );
        assert!(parse_ttl("400d").is_err());
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(7 * 86_400)));
    }

    #[test]
    fn sizes_are_bounded() {
        assert_eq!(parse_size("1MiB", MAX_BODY_LIMIT), Ok(1 << 20));
        assert!(
            parse_size("2GiB", MAX_BODY_LIMIT)
                .unwrap_err()
                .contains("limit")
        );
        assert!(parse_size("lots", MAX_BODY_LIMIT).is_err());
    }

    #[test]
    fn a_config_out_of_range_is_refused_with_the_settings_name() {
        let ok = Config::new("wm.log");
        assert_eq!(ok.validate(), Ok(()));
        let mut c = ok.clone();
        c.header_timeout = Duration::MAX;
        assert!(c.validate().unwrap_err().contains("--header-timeout"));
        let mut c = ok.clone();
        c.max_concurrent = 0;
        assert!(c.validate().unwrap_err().contains("--max-concurrent"));
        let mut c = ok.clone();
        c.upstream = Some("api.anthropic.com".into());
        assert!(c.validate().is_err());
        let mut c = ok.clone();
        c.body_limit = usize::MAX;
        assert!(c.validate().unwrap_err().contains("--body-limit"));
    }

    #[test]
    fn tools_need_an_upstream_a_round_and_no_tools_of_the_operators() {
        let mut c = Config::new("wm.log");
        c.tools.memory = true;
        assert!(c.validate().unwrap_err().contains("need --upstream"));
        c.upstream = Some("http://127.0.0.1:9".into());
        c.model = Some("m".into());
        assert_eq!(c.validate(), Ok(()));
        c.tools.max_rounds = 0;
        assert!(c.validate().unwrap_err().contains("--max-tool-rounds"));
        c.tools.max_rounds = 4;
        c.upstream_fields = vec![("tools".into(), json!([]))];
        assert!(c.validate().unwrap_err().contains("--upstream-field tools"));
    }

    #[test]
    fn upstream_urls_are_checked() {
        let e = parse_upstream("api.anthropic.com").unwrap_err();
        assert!(e.contains("https://api.anthropic.com"), "{e}");
        assert!(parse_upstream("ftp://h/").unwrap_err().contains("scheme"));
        assert!(parse_upstream("http://").is_err());
        assert!(parse_upstream("https://h/?a=1").is_err());
        assert!(parse_upstream("http://localhost:8080").is_ok());
    }

    #[test]
    fn upstream_fields_are_json_and_not_reserved() {
        assert_eq!(
            parse_field("temperature=0.2").unwrap(),
            ("temperature".into(), json!(0.2))
        );
        assert_eq!(
            parse_field("stop=[\"x\"]").unwrap(),
            ("stop".into(), json!(["x"]))
        );
        assert!(parse_field("user=abc").unwrap_err().contains("quote"));
        assert!(parse_field("messages=[]").is_err());
        assert!(parse_field("model=\"x\"").is_err());
        assert!(parse_field("noequals").is_err());
    }

    #[test]
    fn upstream_headers_are_checked_and_the_key_header_is_refused() {
        assert_eq!(
            parse_header("Anthropic-Beta=context-1m-2025-08-07").unwrap(),
            ("anthropic-beta".into(), "context-1m-2025-08-07".into())
        );
        assert!(parse_header("x-api-key=abc").is_err());
        assert!(parse_header("Authorization=Bearer x").is_err());
        assert!(parse_header("bad name=x").is_err());
        assert!(parse_header("noequals").is_err());
        assert!(parse_header("x-a=line\nbreak").is_err());
    }

    #[test]
    fn an_upstream_needs_a_model_and_fields_follow_the_providers_rules() {
        let mut c = Config::new("wm.log");
        c.upstream = Some("https://api.anthropic.com".into());
        let e = c.validate().unwrap_err();
        assert!(e.contains("--model") && e.contains("WMREPLAY_MODEL"), "{e}");
        c.model = Some("claude-sonnet-5-5".into());
        assert_eq!(c.validate(), Ok(()));
        c.upstream_fields = vec![("stop".into(), json!(["END"]))];
        assert_eq!(c.validate(), Ok(()), "stop is mapped to stop_sequences");
        c.upstream_fields = vec![
            ("temperature".into(), json!(0.2)),
            ("top_p".into(), json!(0.9)),
        ];
        assert!(c.validate().unwrap_err().contains("top_p"));
        c.upstream_fields = vec![("frequency_penalty".into(), json!(1))];
        assert!(c.validate().unwrap_err().contains("frequency_penalty"));
        c.allow_params = vec!["frequency_penalty".into()];
        assert_eq!(c.validate(), Ok(()));
    }
}
