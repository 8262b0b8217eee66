//! A replay rendered as a request body: whole, fallibly, measured for a
//! caller's buffer, streamed, with prompt-cache breakpoints, or as a
//! [`RequestSpec`] describes it.

use std::io::Write;

use super::Replay;
use crate::error::AllocError;
use crate::order;
use crate::parse::Record;
use crate::render::Format;
use crate::render::cache::{CacheMemory, CachePolicy};
use crate::render::fields::RequestSpec;
use crate::render::request::{self, CurrentRequest, Lead};

impl Replay<'_> {
    /// What the body carries besides the messages: `fields`, and the facts
    /// message once selected.
    fn lead<'s>(&'s self, fields: &'s str, recall: Option<&'s str>) -> Lead<'s> {
        Lead {
            fields,
            facts: self.facts_text(),
            recall,
        }
    }

    /// The whole request body (system rule, messages, current request) in
    /// one exactly-sized buffer.
    pub fn render_request(
        &self,
        format: Format,
        system: &str,
        current: &CurrentRequest<'_>,
    ) -> Vec<u8> {
        self.try_render_request(format, system, current)
            .unwrap_or_else(|e| e.abort())
    }

    /// [`render_request`](Self::render_request), with the [`AllocError`]
    /// instead of an abort when the body does not fit in memory.
    ///
    /// ```
    /// use wmreplay::{CurrentRequest, Format, ReplayOptions, SYSTEM_RULE, replay};
    ///
    /// let replayed = replay(b"{\"type\":\"wm_event\",\"ts_ms\":1}\n", &ReplayOptions::default());
    /// let current = CurrentRequest { text: "hi", session_id: None };
    /// let body = replayed.try_render_request(Format::OpenAi, SYSTEM_RULE, &current)?;
    /// assert_eq!(body, replayed.render_request(Format::OpenAi, SYSTEM_RULE, &current));
    /// # Ok::<(), wmreplay::AllocError>(())
    /// ```
    pub fn try_render_request(
        &self,
        format: Format,
        system: &str,
        current: &CurrentRequest<'_>,
    ) -> Result<Vec<u8>, AllocError> {
        let spec = RequestSpec::new(format, system, *current);
        self.render_spec(&spec, &mut CacheMemory::default())
    }

    /// The request body in Anthropic's format with prompt-cache breakpoints
    /// placed for an append-only log (see [`CachePolicy`]): up to
    /// `policy.max_breakpoints` `cache_control` members on replayed messages
    /// (and on the system prompt, then a one-block array, when one is left
    /// over). `memory` carries the last request's mark to the next request
    /// of the same conversation; a fresh one works too (stable positions
    /// and the last message are marked either way).
    ///
    /// ```
    /// use wmreplay::{CacheMemory, CachePolicy, CurrentRequest, Format, ReplayOptions, SYSTEM_RULE, replay};
    ///
    /// let log = b"{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"hi\"}\n";
    /// let replayed = replay(log, &ReplayOptions::default());
    /// let current = CurrentRequest { text: "next?", session_id: None };
    /// let mut memory = CacheMemory::default();
    /// let body = replayed.render_request_cached(SYSTEM_RULE, &current, &CachePolicy::default(), &mut memory);
    /// let body = String::from_utf8(body).unwrap();
    /// // The last replayed message carries a breakpoint; the current request never does.
    /// assert!(body.contains(r#"\"text\":\"hi\"}","cache_control":{"type":"ephemeral"}}]}"#));
    /// assert_eq!(body.matches("cache_control").count(), 2); // that message and the system block
    /// assert!(body.starts_with(r#"{"system":[{"type":"text","text":""#));
    /// # let _ = Format::Anthropic;
    /// ```
    pub fn render_request_cached(
        &self,
        system: &str,
        current: &CurrentRequest<'_>,
        policy: &CachePolicy,
        memory: &mut CacheMemory,
    ) -> Vec<u8> {
        let spec = RequestSpec::new(Format::Anthropic, system, *current).with_cache(*policy);
        // Placed with breakpoints, the body is allocated infallibly.
        self.render_spec(&spec, memory)
            .unwrap_or_else(|e| e.abort())
    }

    /// [`render_request_cached`](Self::render_request_cached) streamed to
    /// `w` with bounded memory (what `respond --cache auto` writes).
    ///
    /// ```
    /// use wmreplay::{CacheMemory, CachePolicy, CurrentRequest, ReplayOptions, SYSTEM_RULE, replay};
    ///
    /// let log = b"{\"type\":\"text_input\",\"ts_ms\":1,\"text\":\"hi\"}\n";
    /// let replayed = replay(log, &ReplayOptions::default());
    /// let current = CurrentRequest { text: "next?", session_id: None };
    /// let policy = CachePolicy::default();
    /// let mut streamed = Vec::new();
    /// replayed.write_request_cached(SYSTEM_RULE, &current, &policy, &mut CacheMemory::default(), &mut streamed)?;
    /// let whole = replayed.render_request_cached(SYSTEM_RULE, &current, &policy, &mut CacheMemory::default());
    /// assert_eq!(streamed, whole);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write_request_cached(
        &self,
        system: &str,
        current: &CurrentRequest<'_>,
        policy: &CachePolicy,
        memory: &mut CacheMemory,
        w: &mut dyn Write,
    ) -> std::io::Result<()> {
        let spec = RequestSpec::new(Format::Anthropic, system, *current).with_cache(*policy);
        self.write_spec(&spec, memory, w)
    }

    /// What the prompt-cache placement remembers message `i` of `records`
    /// by: its `ts_ms` order key and its line's offset in the log.
    fn cache_id<'s>(&'s self, records: &'s [Record]) -> impl Fn(usize) -> (u64, u64) + 's {
        move |i| {
            let r = &records[i];
            (order::ts_key(r.ts_ms()), self.source_offset(r))
        }
    }

    /// The request body measured, to be written into a buffer the caller
    /// allocates: what [`render_request`](Self::render_request) gives, without
    /// the copy into the caller's memory.
    ///
    /// ```
    /// use wmreplay::{CurrentRequest, Format, ReplayOptions, SYSTEM_RULE, replay};
    ///
    /// let replayed = replay(b"{\"type\":\"wm_event\",\"ts_ms\":1}\n", &ReplayOptions::default());
    /// let current = CurrentRequest { text: "hi", session_id: None };
    /// let sized = replayed.sized_request(Format::Anthropic, SYSTEM_RULE, &current);
    /// let mut buf = vec![0u8; sized.len()];
    /// sized.write_into(&mut buf);
    /// assert_eq!(buf, replayed.render_request(Format::Anthropic, SYSTEM_RULE, &current));
    /// ```
    pub fn sized_request(
        &self,
        format: Format,
        system: &str,
        current: &CurrentRequest<'_>,
    ) -> request::SizedRequest<'_> {
        request::SizedRequest::new(
            self.records(),
            self.data(),
            format,
            self.lead("", None),
            system,
            current,
        )
    }

    /// Streams the request body to `w` with bounded memory.
    pub fn write_request(
        &self,
        format: Format,
        system: &str,
        current: &CurrentRequest<'_>,
        w: &mut dyn Write,
    ) -> std::io::Result<()> {
        self.write_spec(
            &RequestSpec::new(format, system, *current),
            &mut CacheMemory::default(),
            w,
        )
    }

    /// The request a [`RequestSpec`] describes: its leading fields, the
    /// system prompt, the messages (with prompt-cache breakpoints when
    /// `spec.cache` is set: Anthropic only), the current request. What
    /// `wmreplay respond --model …` writes.
    ///
    /// ```
    /// use wmreplay::{CurrentRequest, Format, ReplayOptions, RequestSpec, SYSTEM_RULE, replay, request_fields};
    ///
    /// let replayed = replay(b"{\"type\":\"wm_event\",\"ts_ms\":1}\n", &ReplayOptions::default());
    /// let fields = request_fields(Format::Anthropic, "claude-opus-4-5", 512, false, &[], &[])?;
    /// let spec = RequestSpec::new(Format::Anthropic, SYSTEM_RULE, CurrentRequest { text: "hi", session_id: None })
    ///     .with_fields(&fields);
    /// let body = String::from_utf8(replayed.render_request_with(&spec)).unwrap();
    /// assert!(body.starts_with(r#"{"model":"claude-opus-4-5","max_tokens":512,"system":"#));
    /// # Ok::<(), wmreplay::ParamError>(())
    /// ```
    pub fn render_request_with(&self, spec: &RequestSpec<'_>) -> Vec<u8> {
        self.try_render_request_with(spec)
            .unwrap_or_else(|e| e.abort())
    }

    /// [`render_request_with`](Self::render_request_with), with the
    /// [`AllocError`] instead of an abort when the body does not fit in
    /// memory (the cached form is allocated infallibly for now).
    pub fn try_render_request_with(&self, spec: &RequestSpec<'_>) -> Result<Vec<u8>, AllocError> {
        self.render_spec(spec, &mut CacheMemory::default())
    }

    /// [`render_request_with`](Self::render_request_with) streamed to `w`
    /// with bounded memory.
    pub fn write_request_with(
        &self,
        spec: &RequestSpec<'_>,
        w: &mut dyn Write,
    ) -> std::io::Result<()> {
        self.write_spec(spec, &mut CacheMemory::default(), w)
    }

    /// The body `spec` describes, the breakpoints (if any) placed with
    /// `memory`: what every `render_request*` method writes.
    pub(crate) fn render_spec(
        &self,
        spec: &RequestSpec<'_>,
        memory: &mut CacheMemory,
    ) -> Result<Vec<u8>, AllocError> {
        let records = self.records();
        let lead = self.lead(spec.fields, spec.recall);
        match &spec.cache {
            Some(policy) if spec.format == Format::Anthropic => Ok(request::render_request_cached(
                records,
                self.data(),
                self.cache_id(records),
                lead,
                spec.system,
                &spec.current,
                policy,
                memory,
            )),
            _ => request::try_render_request(
                records,
                self.data(),
                spec.format,
                lead,
                spec.system,
                &spec.current,
            ),
        }
    }

    /// [`render_spec`](Self::render_spec) streamed to `w` with bounded
    /// memory: what every `write_request*` method writes.
    fn write_spec(
        &self,
        spec: &RequestSpec<'_>,
        memory: &mut CacheMemory,
        w: &mut dyn Write,
    ) -> std::io::Result<()> {
        let lead = self.lead(spec.fields, spec.recall);
        match &spec.cache {
            Some(policy) if spec.format == Format::Anthropic => {
                let records = self.records();
                request::write_request_cached(
                    records,
                    self.data(),
                    self.cache_id(records),
                    lead,
                    spec.system,
                    &spec.current,
                    policy,
                    memory,
                    w,
                )
            }
            _ => request::write_request(
                self.sequence(),
                self.data(),
                spec.format,
                lead,
                spec.system,
                &spec.current,
                w,
            ),
        }
    }
}
