//! Picking a provider's own shapes: the headers, the answer and the streamed
//! events of each provider, dispatched to `anthropic.rs` or `openai.rs`.
//! The shared types are in the folder's `mod.rs`; nothing here is new API.

use serde_json::Value;

use super::{Answer, ApiKey, Provider, Step, StreamDecoder, anthropic, openai};

impl Provider {
    /// The provider's headers (the key marked sensitive, so it is never
    /// printed by the HTTP stack's debug output), then `extra` (names and
    /// values checked at start-up), each replacing the provider's header of
    /// the same name.
    pub fn headers(
        self,
        key: Option<&ApiKey>,
        extra: &[(String, String)],
    ) -> reqwest::header::HeaderMap {
        use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        match self {
            Provider::Anthropic => anthropic::headers(&mut h, key),
            Provider::OpenAi => openai::headers(&mut h, key),
        }
        for (name, value) in extra {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                h.insert(n, v);
            }
        }
        h
    }

    /// The answer of a non-streaming response.
    pub fn answer(self, body: &Value) -> Option<Answer> {
        match self {
            Provider::Anthropic => anthropic::answer(body),
            Provider::OpenAi => openai::answer(body),
        }
    }
}

impl StreamDecoder {
    /// Decodes one event (`event` is its name, or empty; `data` its data).
    pub fn event(&mut self, event: &str, data: &str) -> Step {
        if self.finished {
            return Step::Nothing;
        }
        let step = match self.provider {
            _ if self.responses => super::responses::stream_event(self, event, data),
            Provider::Anthropic => anthropic::stream_event(self, event, data),
            Provider::OpenAi => openai::stream_event(self, data),
        };
        if step == Step::Done {
            self.finished = true;
        }
        step
    }
}
