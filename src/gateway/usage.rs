//! Token usage read from the provider's own answers (pure): an incremental tap that is fed
//! the response body's bytes as they pass (never changing them) and at the end says which
//! model answered and how many tokens of each kind it billed.
//!
//! Formats, per API (streamed as Server-Sent Events, or one JSON body):
//! - **Anthropic Messages**: `message_start` carries `message.model` and `message.usage`
//!   (`input_tokens` uncached, `cache_creation_input_tokens`, `cache_read_input_tokens`,
//!   `output_tokens` so far); each `message_delta` carries cumulative `usage` (always
//!   `output_tokens`, sometimes the input figures again): the latest value of each wins.
//!   A JSON body has `model` and `usage` at the top.
//! - **OpenAI Responses**: the terminal event (`response.completed`, `.incomplete`,
//!   `.failed`) carries `response.model` and `response.usage` {`input_tokens` (cached
//!   included), `input_tokens_details.cached_tokens`, `output_tokens` (reasoning
//!   included)}; a JSON body is the response object itself.
//! - **OpenAI Chat Completions** (Kimi): `model` and, on the last chunk or the body,
//!   `usage` {`prompt_tokens` (cached included), `prompt_tokens_details.cached_tokens` or
//!   Moonshot's `cached_tokens`, `completion_tokens`}.
//! - **Gemini**: every chunk (or the body) may carry `modelVersion` and `usageMetadata`
//!   {`promptTokenCount` (cached included), `cachedContentTokenCount`,
//!   `candidatesTokenCount`, `thoughtsTokenCount`}: the last one wins.
//!
//! Everything is normalised to uncached input, cache writes, cache reads and output. One
//! SSE event or a JSON body larger than [`MAX_EVENT_BYTES`] is skipped (counted in
//! `skipped`), never buffered without bound.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Api;

/// The largest SSE event or JSON body the tap keeps a copy of to parse.
pub const MAX_EVENT_BYTES: usize = 8 << 20;

/// Tokens one request was billed for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input not read from a cache (and not written to one).
    pub input_tokens: u64,
    pub cache_write_tokens: u64,
    pub cache_read_tokens: u64,
    /// Output, reasoning/thinking included.
    pub output_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens + self.cache_write_tokens + self.cache_read_tokens + self.output_tokens
    }

    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.output_tokens += other.output_tokens;
    }

    /// The attempt's token counts in the adapters' meaning (`TokenUsage`: `input` is every
    /// input token, cache reads and writes included; `cached_input` the cache reads), so a
    /// gateway-metered attempt and `replay` of its transcript say the same (issue 26). The
    /// price is computed from `self`, never from this sum.
    pub fn as_token_usage(&self) -> crate::domain::TokenUsage {
        crate::domain::TokenUsage {
            input: self.input_tokens + self.cache_write_tokens + self.cache_read_tokens,
            output: self.output_tokens,
            cached_input: self.cache_read_tokens,
        }
    }
}

/// What a finished (or cut) response said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metered {
    /// The model that answered, as the provider named it.
    pub model: Option<String>,
    /// `None` when the answer carried no usage at all (an error, a cut stream).
    pub usage: Option<Usage>,
    /// Events or bodies too large to parse.
    pub skipped: u32,
}

/// Feeds on a response body and extracts usage.
#[derive(Debug)]
pub struct UsageTap {
    api: Api,
    sse: bool,
    /// SSE: the current line so far; JSON: the body so far.
    buf: Vec<u8>,
    /// SSE: the current event's `data:` lines joined with `\n`.
    data: Vec<u8>,
    overflow: bool,
    out: Metered,
}

impl UsageTap {
    /// `sse`: the response is `text/event-stream`; otherwise its body is parsed as JSON.
    pub fn new(api: Api, sse: bool) -> UsageTap {
        UsageTap {
            api,
            sse,
            buf: Vec::new(),
            data: Vec::new(),
            overflow: false,
            out: Metered::default(),
        }
    }

    /// Takes the next bytes of the body (any split: mid-line, mid-UTF-8).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        if !self.sse {
            if self.buf.len() + bytes.len() > MAX_EVENT_BYTES {
                self.overflow = true;
                self.buf = Vec::new();
            } else if !self.overflow {
                self.buf.extend_from_slice(bytes);
            }
            return;
        }
        while let Some(nl) = memchr::memchr(b'\n', bytes) {
            self.push_line_part(&bytes[..nl]);
            let line = std::mem::take(&mut self.buf);
            self.line(&line);
            bytes = &bytes[nl + 1..];
        }
        self.push_line_part(bytes);
    }

    fn push_line_part(&mut self, part: &[u8]) {
        if self.buf.len() + part.len() > MAX_EVENT_BYTES {
            self.overflow = true;
            self.buf.clear();
        } else {
            self.buf.extend_from_slice(part);
        }
    }

    /// One SSE line (without its `\n`).
    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if let Some(rest) = line.strip_prefix(b"data:") {
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            if self.data.len() + rest.len() + 1 > MAX_EVENT_BYTES {
                self.overflow = true;
                self.data.clear();
                return;
            }
            if !self.data.is_empty() {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(rest);
        }
        // `event:`, `id:`, `retry:` and comments carry nothing we need: the JSON names
        // its own type.
    }

    fn dispatch(&mut self) {
        let data = std::mem::take(&mut self.data);
        if std::mem::take(&mut self.overflow) {
            self.out.skipped += 1;
            return;
        }
        if data.is_empty() || data == b"[DONE]" {
            return;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(&data) {
            self.event(&v);
        }
    }

    /// The body ended (or was cut): what it said.
    pub fn finish(mut self) -> Metered {
        if self.sse {
            if !self.buf.is_empty() {
                let line = std::mem::take(&mut self.buf);
                self.line(&line);
            }
            self.dispatch();
        } else if self.overflow {
            self.out.skipped += 1;
        } else if let Ok(v) = serde_json::from_slice::<Value>(&self.buf) {
            self.body(&v);
        }
        self.out
    }

    /// One streamed event.
    fn event(&mut self, v: &Value) {
        match self.api {
            Api::Anthropic => match v["type"].as_str() {
                Some("message_start") => {
                    let m = &v["message"];
                    self.model(&m["model"]);
                    self.anthropic_usage(&m["usage"]);
                }
                Some("message_delta") => self.anthropic_usage(&v["usage"]),
                _ => {}
            },
            Api::OpenAiResponses => {
                let r = &v["response"];
                if r.is_object() {
                    self.model(&r["model"]);
                    self.responses_usage(&r["usage"]);
                }
            }
            Api::OpenAiChat => self.chat(v),
            Api::Gemini => self.gemini(v),
        }
    }

    /// A whole JSON answer.
    fn body(&mut self, v: &Value) {
        match self.api {
            Api::Anthropic => {
                self.model(&v["model"]);
                self.anthropic_usage(&v["usage"]);
            }
            Api::OpenAiResponses => {
                self.model(&v["model"]);
                self.responses_usage(&v["usage"]);
            }
            Api::OpenAiChat => self.chat(v),
            Api::Gemini => match v.as_array() {
                // A non-SSE `streamGenerateContent` answers a JSON array of chunks.
                Some(chunks) => chunks.iter().for_each(|c| self.gemini(c)),
                None => self.gemini(v),
            },
        }
    }

    fn model(&mut self, m: &Value) {
        if let Some(m) = m.as_str().filter(|m| !m.is_empty()) {
            self.out.model = Some(m.chars().take(200).collect());
        }
    }

    fn usage_mut(&mut self) -> &mut Usage {
        self.out.usage.get_or_insert_with(Usage::default)
    }

    fn anthropic_usage(&mut self, u: &Value) {
        if !u.is_object() {
            return;
        }
        let usage = self.usage_mut();
        for (key, slot) in [
            ("input_tokens", &mut usage.input_tokens),
            ("cache_creation_input_tokens", &mut usage.cache_write_tokens),
            ("cache_read_input_tokens", &mut usage.cache_read_tokens),
            ("output_tokens", &mut usage.output_tokens),
        ] {
            if let Some(n) = u[key].as_u64() {
                *slot = n;
            }
        }
    }

    fn responses_usage(&mut self, u: &Value) {
        if !u.is_object() {
            return;
        }
        let input = u["input_tokens"].as_u64().unwrap_or(0);
        let cached = u["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0)
            .min(input);
        *self.usage_mut() = Usage {
            input_tokens: input - cached,
            cache_write_tokens: 0,
            cache_read_tokens: cached,
            output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
        };
    }

    fn chat(&mut self, v: &Value) {
        self.model(&v["model"]);
        let u = &v["usage"];
        if !u.is_object() {
            return;
        }
        let input = u["prompt_tokens"].as_u64().unwrap_or(0);
        let cached = u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .or_else(|| u["cached_tokens"].as_u64())
            .unwrap_or(0)
            .min(input);
        *self.usage_mut() = Usage {
            input_tokens: input - cached,
            cache_write_tokens: 0,
            cache_read_tokens: cached,
            output_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
        };
    }

    fn gemini(&mut self, v: &Value) {
        self.model(&v["modelVersion"]);
        let u = &v["usageMetadata"];
        if !u.is_object() {
            return;
        }
        let input = u["promptTokenCount"].as_u64().unwrap_or(0);
        let cached = u["cachedContentTokenCount"]
            .as_u64()
            .unwrap_or(0)
            .min(input);
        *self.usage_mut() = Usage {
            input_tokens: input - cached,
            cache_write_tokens: 0,
            cache_read_tokens: cached,
            output_tokens: u["candidatesTokenCount"].as_u64().unwrap_or(0)
                + u["thoughtsTokenCount"].as_u64().unwrap_or(0),
        };
    }
}

/// Convenience: the whole body at once.
pub fn meter(api: Api, sse: bool, body: &[u8]) -> Metered {
    let mut tap = UsageTap::new(api, sse);
    tap.feed(body);
    tap.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_usage_counts_input_with_the_cache_as_the_adapters_do() {
        // 1000 uncached + 2000 read from the cache + 500 written to it.
        let u = Usage {
            input_tokens: 1000,
            cache_write_tokens: 500,
            cache_read_tokens: 2000,
            output_tokens: 40,
        };
        let t = u.as_token_usage();
        assert_eq!((t.input, t.cached_input, t.output), (3500, 2000, 40));
        // The Claude adapter reads the same figures from the CLI's usage line.
        let line = r#"{"type":"result","subtype":"success","is_error":false,"num_turns":1,"usage":{"input_tokens":1000,"cache_creation_input_tokens":500,"cache_read_input_tokens":2000,"output_tokens":40}}"#;
        assert_eq!(replayed(crate::domain::AgentType::Claude, line), t);
        // Codex: the Responses API's 3000 input with 2000 cached is 1000 uncached at the
        // gateway, and 3000 input (2000 cached) for the adapter, as Codex reports it.
        let m = meter(
            Api::OpenAiResponses,
            false,
            br#"{"model":"gpt-5.5","usage":{"input_tokens":3000,"input_tokens_details":{"cached_tokens":2000},"output_tokens":7}}"#,
        );
        let u = m.usage.expect("usage");
        assert_eq!((u.input_tokens, u.cache_read_tokens), (1000, 2000));
        let line = r#"{"type":"turn.completed","usage":{"input_tokens":3000,"cached_input_tokens":2000,"output_tokens":7}}"#;
        assert_eq!(
            replayed(crate::domain::AgentType::Codex, line),
            u.as_token_usage()
        );
    }

    fn replayed(agent: crate::domain::AgentType, line: &str) -> crate::domain::TokenUsage {
        let adapter = crate::agents::adapter_for(agent);
        crate::agents::replay::replay(line.as_bytes(), &*adapter)
            .expect("replay")
            .outcome
            .tokens
    }

    fn u(i: u64, w: u64, r: u64, o: u64) -> Option<Usage> {
        Some(Usage {
            input_tokens: i,
            cache_write_tokens: w,
            cache_read_tokens: r,
            output_tokens: o,
        })
    }

    /// An Anthropic stream as the API sends it (event lines, CRLF or LF).
    const ANTHROPIC_SSE: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5-20250929\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1200,\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":5000,\"output_tokens\":1}}}\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi \\u00e9\"}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":40}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    #[test]
    fn anthropic_stream_in_any_split() {
        let whole = meter(Api::Anthropic, true, ANTHROPIC_SSE.as_bytes());
        assert_eq!(whole.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        assert_eq!(whole.usage, u(1200, 300, 5000, 40));
        // Every split point (mid-line, mid-UTF-8) gives the same figures; so does CRLF.
        let bytes = ANTHROPIC_SSE.as_bytes();
        for cut in 0..bytes.len() {
            let mut tap = UsageTap::new(Api::Anthropic, true);
            tap.feed(&bytes[..cut]);
            tap.feed(&bytes[cut..]);
            assert_eq!(tap.finish(), whole, "cut at {cut}");
        }
        let crlf = ANTHROPIC_SSE.replace('\n', "\r\n");
        assert_eq!(meter(Api::Anthropic, true, crlf.as_bytes()), whole);
        // Byte by byte.
        let mut tap = UsageTap::new(Api::Anthropic, true);
        for b in bytes {
            tap.feed(std::slice::from_ref(b));
        }
        assert_eq!(tap.finish(), whole);
    }

    #[test]
    fn anthropic_delta_with_cumulative_input_replaces_it() {
        let s = "data: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":7,\"output_tokens\":99}}\n\n";
        assert_eq!(
            meter(Api::Anthropic, true, s.as_bytes()).usage,
            u(12, 0, 7, 99)
        );
        // Cut before message_delta: what message_start said.
        let cut = &s[..s.find("data: {\"type\":\"message_delta").unwrap()];
        assert_eq!(
            meter(Api::Anthropic, true, cut.as_bytes()).usage,
            u(10, 0, 0, 1)
        );
        // No final blank line: the last event still counts.
        assert_eq!(
            meter(Api::Anthropic, true, s.trim_end().as_bytes()).usage,
            u(12, 0, 7, 99)
        );
    }

    #[test]
    fn anthropic_json_body_and_errors() {
        let body = r#"{"id":"msg_1","type":"message","model":"claude-haiku-4-5","content":[],"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":2,"output_tokens":3}}"#;
        let m = meter(Api::Anthropic, false, body.as_bytes());
        assert_eq!(m.model.as_deref(), Some("claude-haiku-4-5"));
        assert_eq!(m.usage, u(5, 0, 2, 3));
        let err = r#"{"type":"error","error":{"type":"rate_limit_error","message":"x"}}"#;
        assert_eq!(
            meter(Api::Anthropic, false, err.as_bytes()),
            Metered::default()
        );
        assert_eq!(
            meter(Api::Anthropic, false, b"not json"),
            Metered::default()
        );
        assert_eq!(
            meter(Api::Anthropic, true, b"data: {broken\n\n"),
            Metered::default()
        );
    }

    #[test]
    fn openai_responses_stream_and_body() {
        let s = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-5.1-codex\",\"usage\":null}}\n\nevent: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-5.1-codex\",\"usage\":{\"input_tokens\":9000,\"input_tokens_details\":{\"cached_tokens\":8000},\"output_tokens\":300,\"output_tokens_details\":{\"reasoning_tokens\":200},\"total_tokens\":9300}}}\n\n";
        let m = meter(Api::OpenAiResponses, true, s.as_bytes());
        assert_eq!(m.model.as_deref(), Some("gpt-5.1-codex"));
        assert_eq!(m.usage, u(1000, 0, 8000, 300));
        let body = r#"{"id":"resp_1","object":"response","model":"gpt-5","usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":50},"output_tokens":4}}"#;
        // Cached never exceeds the input it is part of.
        assert_eq!(
            meter(Api::OpenAiResponses, false, body.as_bytes()).usage,
            u(0, 0, 10, 4)
        );
    }

    #[test]
    fn chat_completions_and_gemini() {
        let s = "data: {\"id\":\"c1\",\"model\":\"kimi-k2-0905-preview\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"id\":\"c1\",\"model\":\"kimi-k2-0905-preview\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":7,\"cached_tokens\":60}}\n\ndata: [DONE]\n\n";
        let m = meter(Api::OpenAiChat, true, s.as_bytes());
        assert_eq!(m.model.as_deref(), Some("kimi-k2-0905-preview"));
        assert_eq!(m.usage, u(40, 0, 60, 7));
        let g = "data: {\"candidates\":[],\"usageMetadata\":{\"promptTokenCount\":50,\"totalTokenCount\":50},\"modelVersion\":\"gemini-2.5-pro\"}\r\n\r\ndata: {\"candidates\":[],\"usageMetadata\":{\"promptTokenCount\":50,\"cachedContentTokenCount\":20,\"candidatesTokenCount\":9,\"thoughtsTokenCount\":11},\"modelVersion\":\"gemini-2.5-pro\"}\r\n\r\n";
        let m = meter(Api::Gemini, true, g.as_bytes());
        assert_eq!(m.model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(m.usage, u(30, 0, 20, 20));
        let arr = r#"[{"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":1}},{"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":3},"modelVersion":"gemini-2.5-flash"}]"#;
        assert_eq!(
            meter(Api::Gemini, false, arr.as_bytes()).usage,
            u(5, 0, 0, 3)
        );
    }

    #[test]
    fn oversized_events_are_skipped_not_buffered() {
        let mut tap = UsageTap::new(Api::Anthropic, true);
        tap.feed(b"data: ");
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..9 {
            tap.feed(&chunk);
        }
        tap.feed(b"\n\n");
        tap.feed(ANTHROPIC_SSE.as_bytes());
        let m = tap.finish();
        assert_eq!(m.skipped, 1);
        assert_eq!(m.usage, u(1200, 300, 5000, 40));
        let mut tap = UsageTap::new(Api::Anthropic, false);
        for _ in 0..9 {
            tap.feed(&chunk);
        }
        assert_eq!(tap.finish().skipped, 1);
    }
}
