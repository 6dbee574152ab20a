//! A scripted Anthropic Messages API for driving the REAL Claude Code CLI in tests and
//! `demo --real-claude` (never a real model): an
//! in-process axum server that answers `HEAD /api/hello` and `POST /v1/messages` with a
//! streaming SSE body (`message_start`, `content_block_start/delta/stop` with `text_delta` or
//! `input_json_delta`, `message_delta` with `stop_reason` and usage, `message_stop`).
//!
//! A test scripts the model turn by turn with a function of the request (its messages as
//! text, and how many agent turns came before) returning a [`Reply`]: call Bash, say
//! something and end the turn, or answer an HTTP error (401, 429 with `retry-after` and the
//! `anthropic-ratelimit-*` headers, 529, 500) the way the real API does.
//!
//! Claude Code also sends side requests (e.g. a title or topic request without `tools`):
//! those get a short text answer and do not count as turns.
//!
//! The server binds wherever the test says: the gateway of a Docker network the test created
//! (so the agent container reaches it and nothing else of the host), or 127.0.0.1.

use std::net::IpAddr;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};

/// What the model does on one turn.
#[derive(Debug, Clone)]
pub enum Reply {
    /// One `tool_use` block calling Bash with this command (`stop_reason: tool_use`).
    Bash(String),
    /// One text block, then `end_turn`.
    Text(String),
    /// 401 `authentication_error` (what an invalid or revoked key gets).
    Unauthorized,
    /// 429 `rate_limit_error` with `retry-after: SECS` and the unified rate-limit headers
    /// saying the window is exhausted until `reset_epoch`.
    RateLimited {
        retry_after_secs: u64,
        reset_epoch: i64,
    },
    /// 529 `overloaded_error`.
    Overloaded,
    /// 500 `api_error`.
    ServerError,
    /// `reply`, billed with this many cache-read input tokens instead of
    /// [`CACHE_READ_TOKENS`] (a request that costs what a test needs).
    Billed {
        reply: Box<Reply>,
        cache_read_tokens: u64,
    },
}

pub use crate::scripted_server::Turn;
use crate::scripted_server::{lock, ScriptedServer, Shared};

/// The scripted Anthropic Messages API; stops when dropped.
pub type ScriptedAnthropic = ScriptedServer<Reply>;

/// Usage reported for every agent turn (input counts uncached + cache reads separately, like
/// the real API).
pub const INPUT_TOKENS: u64 = 1200;
pub const CACHE_READ_TOKENS: u64 = 5000;
pub const OUTPUT_TOKENS: u64 = 40;

impl ScriptedServer<Reply> {
    /// Serves on `ip` (port chosen by the OS) with `script` deciding each agent turn.
    pub async fn start(
        ip: IpAddr,
        script: impl Fn(&Turn<'_>) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<ScriptedAnthropic> {
        ScriptedServer::start_app(ip, script, app).await
    }

    /// Serves on a listener the caller bound (and must be inside a Tokio runtime).
    pub fn serve(
        listener: tokio::net::TcpListener,
        script: impl Fn(&Turn<'_>) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<ScriptedAnthropic> {
        ScriptedServer::serve_app(listener, script, app)
    }

    /// `ANTHROPIC_BASE_URL` for the CLI.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr())
    }
}

fn app(state: Shared<Reply>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

async fn handle(
    State(state): State<Shared<Reply>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let credential = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .or_else(|| {
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
        })
        .unwrap_or("")
        .to_string();
    let reply = {
        let mut s = lock(&state);
        s.record(format!("{method} {path}"), credential);
        if path != "/v1/messages" || method != Method::POST {
            None
        } else {
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let model = request["model"]
                .as_str()
                .unwrap_or("claude-test")
                .to_string();
            let is_agent_turn = request["tools"].as_array().is_some_and(|t| !t.is_empty());
            if is_agent_turn {
                let transcript = format!("{}\n{}", request["system"], request["messages"]);
                let reply = s.turn(&transcript);
                Some((model, reply, request["stream"].as_bool().unwrap_or(false)))
            } else {
                Some((
                    model,
                    Reply::Text("ok".into()),
                    request["stream"].as_bool().unwrap_or(false),
                ))
            }
        }
    };
    match reply {
        None if method == Method::HEAD || method == Method::GET => StatusCode::OK.into_response(),
        None => (StatusCode::NOT_FOUND, "not scripted").into_response(),
        Some((model, reply, stream)) => answer(&model, reply, stream),
    }
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    let mut resp = (status, body.to_string()).into_response();
    resp.headers_mut()
        .insert("content-type", "application/json".parse().expect("header"));
    resp.headers_mut()
        .insert("request-id", "req_scripted".parse().expect("header"));
    resp
}

fn answer(model: &str, reply: Reply, stream: bool) -> Response {
    let (reply, cache_read) = match reply {
        Reply::Billed {
            reply,
            cache_read_tokens,
        } => (*reply, cache_read_tokens),
        other => (other, CACHE_READ_TOKENS),
    };
    let (blocks, stop) = match reply {
        Reply::Bash(command) => (
            vec![
                json!({"type": "tool_use", "id": format!("toolu_{:08x}", fastrand_id()), "name": "Bash",
                        "input": {"command": command, "description": "scripted step"}}),
            ],
            "tool_use",
        ),
        Reply::Text(text) => (vec![json!({"type": "text", "text": text})], "end_turn"),
        // Unwrapped above (a `Billed` inside a `Billed` answers its inner reply).
        Reply::Billed { reply, .. } => return answer(model, *reply, stream),
        Reply::Unauthorized => {
            return error(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid x-api-key",
            )
        }
        Reply::Overloaded => {
            return error(
                StatusCode::from_u16(529).expect("529"),
                "overloaded_error",
                "Overloaded",
            )
        }
        Reply::ServerError => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "Internal server error",
            )
        }
        Reply::RateLimited {
            retry_after_secs,
            reset_epoch,
        } => {
            let mut resp = error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "This request would exceed your account's rate limit. Please try again later.",
            );
            let h = resp.headers_mut();
            let reset = reset_epoch.to_string();
            for (k, v) in [
                ("retry-after", retry_after_secs.to_string()),
                ("anthropic-ratelimit-unified-status", "rejected".into()),
                ("anthropic-ratelimit-unified-reset", reset.clone()),
                ("anthropic-ratelimit-unified-5h-status", "rejected".into()),
                ("anthropic-ratelimit-unified-5h-reset", reset.clone()),
                ("anthropic-ratelimit-unified-5h-utilization", "1.0".into()),
                (
                    "anthropic-ratelimit-unified-representative-claim",
                    "five_hour".into(),
                ),
                ("anthropic-ratelimit-requests-limit", "50".into()),
                ("anthropic-ratelimit-requests-remaining", "0".into()),
                ("anthropic-ratelimit-requests-reset", reset),
            ] {
                h.insert(k, v.parse().expect("header value"));
            }
            return resp;
        }
    };
    let id = format!("msg_{:016x}", fastrand_id());
    let usage = json!({"input_tokens": INPUT_TOKENS, "cache_creation_input_tokens": 0,
                       "cache_read_input_tokens": cache_read, "output_tokens": 1});
    if !stream {
        let body = json!({"id": id, "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": INPUT_TOKENS, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": cache_read, "output_tokens": OUTPUT_TOKENS}});
        let mut resp = (StatusCode::OK, body.to_string()).into_response();
        resp.headers_mut()
            .insert("content-type", "application/json".parse().expect("header"));
        return resp;
    }
    let mut sse = String::new();
    let mut push = |event: &str, data: Value| {
        sse.push_str(&format!("event: {event}\ndata: {data}\n\n"));
    };
    push(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}}),
    );
    for (i, block) in blocks.iter().enumerate() {
        match block["type"].as_str() {
            Some("tool_use") => {
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}),
                );
                let input = block["input"].to_string();
                // Split the JSON the way the API does: several partial deltas.
                let mid = input.len() / 2;
                let cut = (0..=mid)
                    .rev()
                    .find(|&c| input.is_char_boundary(c))
                    .unwrap_or(0);
                for part in [&input[..cut], &input[cut..]] {
                    push(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": part}}),
                    );
                }
            }
            _ => {
                push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i,
                    "content_block": {"type": "text", "text": ""}}),
                );
                push(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": i,
                    "delta": {"type": "text_delta", "text": block["text"]}}),
                );
            }
        }
        push(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        );
    }
    push(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": OUTPUT_TOKENS}}),
    );
    push("message_stop", json!({"type": "message_stop"}));
    let mut resp = Response::new(Body::from(sse));
    let h = resp.headers_mut();
    h.insert("content-type", "text/event-stream".parse().expect("header"));
    h.insert("cache-control", "no-cache".parse().expect("header"));
    h.insert("request-id", "req_scripted".parse().expect("header"));
    resp
}

/// A process-unique number for message and tool ids.
fn fastrand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
