//! A scripted OpenAI Responses API for driving the REAL Codex CLI in tests and
//! `demo --real-codex` (never a real model), beside the scripted Anthropic API
//! ([`crate::scripted_model`]).
//!
//! Codex 0.147.0 with a configured provider (`wire_api = "responses"`) POSTs
//! `{base_url}/responses` with `stream: true` and reads SSE events (codex-rs
//! `codex-api/src/sse/responses.rs`): `response.created`, `response.output_item.added` /
//! `.done` (items `message`, `function_call`, `custom_tool_call`), `response.output_text.delta`
//! and `response.completed {response: {id, usage: {input_tokens, input_tokens_details:
//! {cached_tokens}, output_tokens, output_tokens_details, total_tokens}}}`. A stream that ends
//! without `response.completed` is "stream disconnected before completion" and retried. A
//! non-streamed request (`stream: false`) gets the whole response object as JSON.
//!
//! The tools Codex offers a known model (`gpt-5.5`): `exec_command {cmd}` (a function) and
//! `apply_patch` (a freeform custom tool taking the patch text). A test scripts the model
//! turn by turn with a function of the request returning a [`Reply`]; errors are answered in
//! the real service's body shapes: 401 `invalid_api_key`, 429 `usage_limit_reached` (with
//! `plan_type` and `resets_at`, what the ChatGPT backend sends and codex-rs `api_bridge.rs`
//! reads), 500 `server_error`, and a dropped stream.
//!
//! The server binds wherever the test says (a Docker network's gateway, or 127.0.0.1).

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
    /// A `function_call` to `exec_command` with this shell command.
    Shell(String),
    /// [`Reply::Shell`] asking Codex to wait up to `yield_time_ms` for the command (its
    /// default is 10 s, its cap 30 s) before answering with what it printed so far.
    ShellWaiting { cmd: String, yield_time_ms: u64 },
    /// A `custom_tool_call` to `apply_patch` with this patch (`*** Begin Patch` …).
    ApplyPatch(String),
    /// An assistant message; the turn ends.
    Text(String),
    /// 401 `invalid_api_key` (api.openai.com's answer to a bad key).
    Unauthorized,
    /// 429 `usage_limit_reached` with `resets_at` (epoch seconds).
    UsageLimit { resets_at: i64 },
    /// [`Reply::UsageLimit`] with OpenAI's rate-limit headers besides:
    /// `x-ratelimit-reset-requests: <reset_requests_secs>s` and
    /// `x-ratelimit-reset-tokens: 1s` (api.openai.com's duration spelling).
    UsageLimitWithHeaders {
        resets_at: i64,
        reset_requests_secs: u64,
    },
    /// 404 `model_not_found`.
    ModelNotFound,
    /// 500 `server_error`.
    ServerError,
    /// 200 and an SSE stream cut before `response.completed`.
    DroppedStream,
    /// `reply`, billed with this many cached input tokens (of [`INPUT_TOKENS`]) instead of
    /// [`CACHED_TOKENS`] (a request that costs what a test needs).
    Billed {
        reply: Box<Reply>,
        cached_tokens: u64,
    },
}

pub use crate::scripted_server::Turn;
use crate::scripted_server::{lock, ScriptedServer, Shared};

/// The scripted OpenAI Responses API; stops when dropped.
pub type ScriptedOpenAi = ScriptedServer<Reply>;

/// Usage reported for every response.
pub const INPUT_TOKENS: u64 = 1500;
pub const CACHED_TOKENS: u64 = 1000;
pub const OUTPUT_TOKENS: u64 = 60;

impl ScriptedServer<Reply> {
    /// Serves on `ip` (port chosen by the OS) with `script` deciding each turn.
    pub async fn start(
        ip: IpAddr,
        script: impl Fn(&Turn<'_>) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<ScriptedOpenAi> {
        ScriptedServer::start_app(ip, script, |state| {
            Router::new().fallback(handle).with_state(state)
        })
        .await
    }

    /// The provider `base_url` for Codex (it POSTs `{base_url}/responses`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr())
    }
}

/// The `config.toml` that points Codex at `base_url` through a provider named `scripted`
/// whose key is read from `key_var` (codex-rs `docs/config.md`, model providers).
pub fn codex_config_toml(base_url: &str, key_var: &str, model: &str) -> String {
    format!(
        "model = \"{model}\"\nmodel_provider = \"scripted\"\n\n[model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{base_url}\"\nenv_key = \"{key_var}\"\nwire_api = \"responses\"\n"
    )
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
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let reply = {
        let mut s = lock(&state);
        s.record(format!("{method} {path}"), credential);
        if method != Method::POST || !path.ends_with("/responses") {
            None
        } else {
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let transcript = format!("{}\n{}", request["instructions"], request["input"]);
            let reply = s.turn(&transcript);
            let model = request["model"].as_str().unwrap_or("gpt-5.5").to_string();
            Some((model, reply, request["stream"].as_bool().unwrap_or(false)))
        }
    };
    match reply {
        None => (
            StatusCode::NOT_FOUND,
            json!({"error": {"message": format!("Invalid URL ({method} {path})"), "type": "invalid_request_error", "param": null, "code": null}}).to_string(),
        )
            .into_response(),
        Some((model, reply, stream)) => answer(&model, reply, stream),
    }
}

fn error(status: StatusCode, error: Value) -> Response {
    let mut resp = (status, json!({ "error": error }).to_string()).into_response();
    let h = resp.headers_mut();
    h.insert("content-type", "application/json".parse().expect("header"));
    h.insert("x-request-id", "req_scripted".parse().expect("header"));
    resp
}

fn answer(model: &str, reply: Reply, stream: bool) -> Response {
    let n = next_id();
    let (mut reply, mut cached) = (reply, CACHED_TOKENS);
    while let Reply::Billed {
        reply: inner,
        cached_tokens,
    } = reply
    {
        (reply, cached) = (*inner, cached_tokens.min(INPUT_TOKENS));
    }
    let item = match reply {
        Reply::Shell(cmd) => json!({"type": "function_call", "id": format!("fc_{n}"),
            "call_id": format!("call_{n}"), "name": "exec_command",
            "arguments": json!({"cmd": cmd}).to_string(), "status": "completed"}),
        Reply::ShellWaiting { cmd, yield_time_ms } => {
            json!({"type": "function_call", "id": format!("fc_{n}"),
            "call_id": format!("call_{n}"), "name": "exec_command",
            "arguments": json!({"cmd": cmd, "yield_time_ms": yield_time_ms}).to_string(),
            "status": "completed"})
        }
        Reply::ApplyPatch(patch) => json!({"type": "custom_tool_call", "id": format!("ctc_{n}"),
            "call_id": format!("call_{n}"), "name": "apply_patch", "input": patch, "status": "completed"}),
        Reply::Text(text) => {
            json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]})
        }
        Reply::Unauthorized => {
            return error(
                StatusCode::UNAUTHORIZED,
                json!({"message": "Incorrect API key provided: sk-scri*****cdef. You can find your API key at https://platform.openai.com/account/api-keys.",
                       "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}),
            )
        }
        Reply::UsageLimit { resets_at } => {
            return error(
                StatusCode::TOO_MANY_REQUESTS,
                json!({"type": "usage_limit_reached", "message": "The usage limit has been reached",
                       "plan_type": "plus", "resets_at": resets_at}),
            )
        }
        Reply::UsageLimitWithHeaders {
            resets_at,
            reset_requests_secs,
        } => {
            let mut resp = error(
                StatusCode::TOO_MANY_REQUESTS,
                json!({"type": "usage_limit_reached", "message": "The usage limit has been reached",
                       "plan_type": "plus", "resets_at": resets_at}),
            );
            let h = resp.headers_mut();
            h.insert(
                "x-ratelimit-reset-requests",
                format!("{reset_requests_secs}s").parse().expect("header"),
            );
            h.insert("x-ratelimit-reset-tokens", "1s".parse().expect("header"));
            return resp;
        }
        Reply::ModelNotFound => {
            return error(
                StatusCode::NOT_FOUND,
                json!({"message": format!("The model `{model}` does not exist or you do not have access to it."),
                       "type": "invalid_request_error", "param": null, "code": "model_not_found"}),
            )
        }
        Reply::ServerError => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"message": "The server had an error while processing your request. Sorry about that!",
                       "type": "server_error", "param": null, "code": null}),
            )
        }
        Reply::Billed { .. } => unreachable!("unwrapped by the loop above"),
        Reply::DroppedStream => {
            let created = json!({"type": "response.created", "sequence_number": 0,
                "response": {"id": format!("resp_{n}"), "object": "response", "status": "in_progress", "model": model}});
            return sse(format!("event: response.created\ndata: {created}\n\n"));
        }
    };
    let id = format!("resp_{n}");
    let usage = json!({"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
    let done = json!({"id": id, "object": "response", "status": "completed", "model": model,
        "output": [item], "usage": usage});
    if !stream {
        let mut resp = (StatusCode::OK, done.to_string()).into_response();
        resp.headers_mut()
            .insert("content-type", "application/json".parse().expect("header"));
        return resp;
    }
    let mut body = String::new();
    let mut seq = 0u64;
    let mut push = |event: &str, mut data: Value| {
        data["type"] = Value::from(event);
        data["sequence_number"] = Value::from(seq);
        seq += 1;
        body.push_str(&format!("event: {event}\ndata: {data}\n\n"));
    };
    push(
        "response.created",
        json!({"response": {"id": id, "object": "response", "status": "in_progress", "model": model, "output": []}}),
    );
    // The real API announces a message empty and streams its text.
    let mut added = item.clone();
    if added["type"] == "message" {
        added["content"] = json!([]);
        added["status"] = Value::from("in_progress");
    }
    push(
        "response.output_item.added",
        json!({"output_index": 0, "item": added}),
    );
    if let Some(text) = item["content"][0]["text"].as_str() {
        push(
            "response.output_text.delta",
            json!({"item_id": item["id"], "output_index": 0, "content_index": 0, "delta": text}),
        );
    }
    push(
        "response.output_item.done",
        json!({"output_index": 0, "item": item}),
    );
    push("response.completed", json!({ "response": done }));
    sse(body)
}

fn sse(body: String) -> Response {
    let mut resp = Response::new(Body::from(body));
    let h = resp.headers_mut();
    h.insert("content-type", "text/event-stream".parse().expect("header"));
    h.insert("cache-control", "no-cache".parse().expect("header"));
    h.insert("x-request-id", "req_scripted".parse().expect("header"));
    resp
}

fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
