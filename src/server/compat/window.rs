//! The window a provider-format request is replayed into by default: what
//! the client's model takes (its context window, from the table below),
//! less what the request brings of its own (system prompt, tools, the
//! turn's words and what continues it) and the answer's room
//! (`max_tokens`), so that a request sent upstream never exceeds the
//! model's context window however long the log. `serve --max-tokens-window`
//! (or any window of the server's selection) replaces it.

use super::request::Asked;
use crate::server::upstream::Provider;

/// The context windows of the providers' models, by the start of their
/// names, in tokens (the providers' model pages); the first match wins.
const WINDOWS: &[(&str, u64)] = &[
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("codex", 400_000),
    ("claude-", 200_000),
];

/// The window of a model the table does not name.
const UNKNOWN: u64 = 128_000;

/// The answer's room when the request gives no limit.
const ANSWER: u64 = 32_000;

/// What the model takes less the answer's room and the request's own
/// parts (its parameters as sent upstream, `fields`: the tools among them;
/// its system prompt, the turn's words and what follows them; counted as
/// bytes / 3: JSON and code run denser than prose), of
/// which the window takes three quarters: the window counts the records,
/// and each message sent wraps its record in a label and escapes it (an
/// eighth more with OpenAI's shape, a quarter with Anthropic's blocks).
/// For Anthropic's models three fifths, since the replay is counted with
/// `o200k_base`, which counts about a fifth fewer tokens of a text than
/// Claude's tokenizer.
pub(crate) fn budget(asked: &Asked, fields: &str, more: &[u8], beta: Option<&str>) -> u64 {
    let window = context_window(asked.provider, &asked.model, beta);
    let param = |k: &str| asked.param(k).and_then(|v| v.as_u64());
    let answer = param("max_tokens")
        .or_else(|| param("max_output_tokens"))
        .or_else(|| param("max_completion_tokens"))
        .unwrap_or(ANSWER);
    // The parameters as written upstream, tools included: no second
    // serialization of a client's tools (tens of KB) to count them.
    let own =
        asked.system.as_deref().map_or(0, str::len) + fields.len() + more.len() + asked.text.len();
    let own = (own / 3) as u64;
    let usable = window.saturating_sub(answer).saturating_sub(own);
    let kept = match asked.provider {
        Provider::Anthropic => usable / 5 * 3,
        Provider::OpenAi => usable / 4 * 3,
    };
    kept.max(1_000)
}

/// The context window of `model` (Claude's 1M with its beta feature).
pub(crate) fn context_window(provider: Provider, model: &str, beta: Option<&str>) -> u64 {
    let m = model.to_ascii_lowercase();
    if provider == Provider::Anthropic
        && beta.is_some_and(|b| b.split(',').any(|f| f.trim().starts_with("context-1m")))
    {
        return 1_000_000;
    }
    WINDOWS
        .iter()
        .find(|(p, _)| m.starts_with(p))
        .map_or(UNKNOWN, |(_, w)| *w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_the_providers_models() {
        assert_eq!(
            context_window(Provider::OpenAi, "gpt-4o-mini", None),
            128_000
        );
        assert_eq!(
            context_window(Provider::OpenAi, "gpt-4.1-nano", None),
            1_047_576
        );
        assert_eq!(
            context_window(Provider::OpenAi, "gpt-5.1-codex", None),
            400_000
        );
        assert_eq!(
            context_window(Provider::Anthropic, "claude-sonnet-4-5", None),
            200_000
        );
        let beta = Some("context-1m-2025-08-07,other");
        assert_eq!(
            context_window(Provider::Anthropic, "claude-sonnet-4-5", beta),
            1_000_000
        );
        assert_eq!(
            context_window(Provider::OpenAi, "my-local-model", None),
            UNKNOWN
        );
    }
}
