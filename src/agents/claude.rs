//! Claude Code adapter: `claude -p … --output-format stream-json --verbose` (spec §8.1).
//!
//! Stream: `system` (init, hooks), `assistant`/`user` messages whose content blocks are text,
//! thinking, tool_use or tool_result, `rate_limit_event`, optional `stream_event` partials, and
//! one `result`. Key order is not fixed, the init line may be missing and lines may follow the
//! result.
//!
//! Tokens: the `result` line's `usage` is the run's total and replaces anything counted
//! before it. Until it arrives, each assistant API call's `usage` is counted once (a message
//! is split into one line per content block, all repeating the same id and usage). The two
//! are never added together. `input` counts every prompt token (uncached + cache writes +
//! cache reads); `cached_input` the cache reads.
//!
//! Architecture Invariant: pure; never touches disk, clock, network or Docker.

use serde_json::{Map, Value};

use super::common::{
    classify_line, content_text, event, one_line, str_of, tool_summary, u64_of, unknown_object,
    with_prompt, SUMMARY_CHARS,
};
use super::spec::{AgentSpec, BaseUrl, CredentialKind, FailureText, GatewaySpec, WireApi};
use super::{quota, AgentAdapter, AgentOutcome, Classified, FailureKind, Invocation};
use crate::domain::{AgentType, EventKind, RunSpec, TokenUsage};

pub struct ClaudeAdapter;

/// Claude Code's descriptor.
pub static SPEC: AgentSpec = AgentSpec {
    agent_type: AgentType::Claude,
    command: "claude",
    event_protocol: "claude-stream-json",
    invocation:
        "claude -p PROMPT --output-format stream-json --verbose --dangerously-skip-permissions",
    default_context_window: 200_000,
    auth_dir: ".claude",
    // OAuth tokens on Linux; the account state `~/.claude.json` sits BESIDE the directory.
    credential_files: &[".credentials.json"],
    sibling_files: &[(".json", ".claude.json")],
    api_key_env: &[
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "ANTHROPIC_AUTH_TOKEN",
    ],
    base_url: BaseUrl::Env("ANTHROPIC_BASE_URL"),
    // API key and subscription logins. A staged login refreshes its OAuth token at
    // `TOKEN_URL`: https://platform.claude.com/v1/oauth/token in Claude Code 2.1.332 (its
    // bundled CLI's OAuth config; the string console.anthropic.com no longer occurs in
    // it), console.anthropic.com/v1/oauth/token in older releases still in
    // `tested_versions`.
    api_hosts: &[
        "api.anthropic.com:443",
        "platform.claude.com:443",
        "console.anthropic.com:443",
    ],
    gateway: Some(GatewaySpec {
        api: WireApi::Anthropic,
        credential_vars: &[
            ("ANTHROPIC_API_KEY", CredentialKind::ApiKey),
            ("CLAUDE_CODE_OAUTH_TOKEN", CredentialKind::OAuthToken),
        ],
        base_url_var: "ANTHROPIC_BASE_URL",
        login_files_hint: "; a subscription: `claude setup-token`, then CLAUDE_CODE_OAUTH_TOKEN",
    }),
    default_profile: true,
    version_args: &["--version"],
    version_stub: None,
    tested_versions: Some(((2, 1, 59), (2, 1, 332))),
    login_hint: "run `claude` and `/login` on the host (or set the API key the identity names)",
    failure_text: FailureText {
        // Claude Code 2.1.332 with no login: "Not logged in · Please run /login".
        auth: &[
            "not logged in",
            "please run /login",
            "invalid api key",
            "invalid x-api-key",
            "authentication_error",
            "authentication_failed",
            "oauth token has expired",
        ],
        quota: &[
            "usage limit reached",
            "rate_limit_error",
            "credit balance is too low",
        ],
        // Claude Code 2.1.332 on a 404 `not_found_error`: "There's an issue with the
        // selected model (X). It may not exist or you may not have access to it."
        model: &[
            "issue with the selected model",
            "model_not_found",
            "not_found_error",
        ],
        transient: &["overloaded", "api_error", "internal server error"],
    },
    profile_flags: &[],
};

impl AgentAdapter for ClaudeAdapter {
    fn spec(&self) -> &'static AgentSpec {
        &SPEC
    }

    fn invocation(&self, spec: &RunSpec, prompt: &str) -> Invocation {
        let mut argv = vec![
            spec.cli_command.clone(),
            "-p".to_string(),
            "--output-format".to_string(),
            "stream-json".to_string(),
            // stream-json in print mode refuses to run without --verbose.
            "--verbose".to_string(),
            // Nobody is there to answer a permission prompt; the container is the sandbox.
            "--dangerously-skip-permissions".to_string(),
        ];
        if let Some(turns) = spec.max_turns {
            argv.push("--max-turns".into());
            argv.push(turns.to_string());
        }
        if let Some(model) = &spec.model {
            argv.push("--model".into());
            argv.push(model.clone());
        }
        // Print mode reads the prompt from stdin when none is given.
        with_prompt(argv, prompt, None, None)
    }

    fn classify(&self, line: &str) -> Classified {
        classify_line(line, classify_object)
    }

    fn is_final(&self, event: &Classified) -> bool {
        matches!(str_of(&event.data, "type"), Some("result"))
    }

    fn observe(&self, outcome: &mut AgentOutcome, event: &Classified) {
        let data = &event.data;
        let retry =
            str_of(data, "type") == Some("system") && str_of(data, "subtype") == Some("api_retry");
        if retry {
            observe_api_retry(outcome, data);
            return;
        }
        // Anything else means the CLI got past the failing call.
        outcome.api_retry = None;
        match str_of(data, "type") {
            Some("result") => observe_result(outcome, data),
            Some("assistant") => observe_assistant(outcome, data),
            Some("rate_limit_event") => {
                let info = data.get("rate_limit_info").unwrap_or(&Value::Null);
                if str_of(info, "status") == Some("rejected") {
                    let kind = str_of(info, "rateLimitType").unwrap_or("unknown window");
                    let resets_at = info.get("resetsAt").map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    });
                    let reset = resets_at.as_deref().and_then(quota::raw_reset_hint);
                    outcome.quota = Some(super::QuotaHit {
                        message: format!("rate limit rejected ({kind})"),
                        resets_at,
                        reset,
                    });
                }
            }
            _ => {}
        }
    }
}

fn classify_object(map: Map<String, Value>) -> Classified {
    let kind = map.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "system" => {
            let subtype = map.get("subtype").and_then(Value::as_str).unwrap_or("");
            let summary = if subtype == "init" {
                let model = map.get("model").and_then(Value::as_str).unwrap_or("?");
                let tools = map
                    .get("tools")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                format!("init: model {model}, {tools} tools")
            } else if subtype.is_empty() {
                "system".to_string()
            } else {
                format!("system: {subtype}")
            };
            event(EventKind::System, summary, map)
        }
        "assistant" => classify_assistant(map),
        "user" => classify_user(map),
        "rate_limit_event" => {
            let info = map.get("rate_limit_info").cloned().unwrap_or(Value::Null);
            let status = str_of(&info, "status").unwrap_or("?");
            let window = str_of(&info, "rateLimitType").unwrap_or("");
            event(
                EventKind::Usage,
                format!("rate limit: {status} {window}"),
                map,
            )
        }
        "result" => {
            let subtype = map.get("subtype").and_then(Value::as_str).unwrap_or("?");
            let is_error = map
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let turns = map.get("num_turns").and_then(Value::as_u64).unwrap_or(0);
            let cost = map.get("total_cost_usd").and_then(Value::as_f64);
            let mut summary = format!("result: {subtype}");
            if is_error {
                summary.push_str(" (is_error)");
            }
            summary.push_str(&format!(", {turns} turns"));
            if let Some(c) = cost {
                summary.push_str(&format!(", ${c:.4}"));
            }
            event(EventKind::Result, summary, map)
        }
        "stream_event" => {
            let inner = map
                .get("event")
                .and_then(|e| e.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("?");
            event(EventKind::Message, format!("stream: {inner}"), map)
        }
        "error" => {
            let msg = error_text(&Value::Object(map.clone()));
            event(EventKind::Error, format!("error: {msg}"), map)
        }
        "" => unknown_object(map, "no `type` field".into()),
        other => {
            let note = format!("type `{}`", one_line(other, 40));
            unknown_object(map, note)
        }
    }
}

fn blocks(map: &Map<String, Value>) -> &[Value] {
    map.get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn classify_assistant(map: Map<String, Value>) -> Classified {
    // A synthetic message (API error, usage limit) carries `error` next to `message`.
    if let Some(err) = map.get("error").filter(|e| !e.is_null()) {
        let text = content_text(
            map.get("message")
                .and_then(|m| m.get("content"))
                .unwrap_or(&Value::Null),
        );
        let label = match err {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        return event(EventKind::Error, format!("api error {label}: {text}"), map);
    }
    let mut tool = None;
    let mut text = None;
    let mut thinking = None;
    for block in blocks(&map) {
        match str_of(block, "type") {
            Some("tool_use") | Some("server_tool_use") if tool.is_none() => {
                let name = str_of(block, "name").unwrap_or("tool");
                tool = Some(tool_summary(
                    name,
                    block.get("input").unwrap_or(&Value::Null),
                ));
            }
            Some("text") if text.is_none() => {
                text = str_of(block, "text").map(String::from);
            }
            Some("thinking") | Some("redacted_thinking") if thinking.is_none() => {
                thinking = Some(str_of(block, "thinking").unwrap_or("").to_string());
            }
            _ => {}
        }
    }
    if let Some(t) = tool {
        return event(EventKind::ToolCall, t, map);
    }
    if let Some(t) = text {
        return event(EventKind::Message, format!("assistant: {t}"), map);
    }
    if let Some(t) = thinking {
        return event(EventKind::Message, format!("thinking: {t}"), map);
    }
    event(EventKind::Message, "assistant".into(), map)
}

fn classify_user(map: Map<String, Value>) -> Classified {
    for block in blocks(&map) {
        if str_of(block, "type") == Some("tool_result") {
            let is_error = block
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let body = content_text(block.get("content").unwrap_or(&Value::Null));
            let head = if is_error {
                "tool error"
            } else {
                "tool result"
            };
            return event(EventKind::ToolResult, format!("{head}: {body}"), map);
        }
    }
    let text = map
        .get("message")
        .and_then(|m| m.get("content"))
        .map(content_text)
        .unwrap_or_default();
    event(EventKind::Message, format!("user: {text}"), map)
}

fn usage_of(u: &Value) -> TokenUsage {
    let cache_read = u64_of(u, "cache_read_input_tokens");
    TokenUsage {
        input: u64_of(u, "input_tokens") + u64_of(u, "cache_creation_input_tokens") + cache_read,
        output: u64_of(u, "output_tokens"),
        cached_input: cache_read,
    }
}

fn add(a: TokenUsage, b: TokenUsage) -> TokenUsage {
    TokenUsage {
        input: a.input + b.input,
        output: a.output + b.output,
        cached_input: a.cached_input + b.cached_input,
    }
}

fn observe_assistant(outcome: &mut AgentOutcome, data: &Value) {
    if let Some(err) = data.get("error").filter(|e| !e.is_null()) {
        let text = content_text(
            data.get("message")
                .and_then(|m| m.get("content"))
                .unwrap_or(&Value::Null),
        );
        outcome.error = Some(one_line(&text, 500));
        let label = err.as_str().unwrap_or("");
        if label.contains("rate_limit") || label.contains("billing") {
            outcome.quota = Some(quota::hit(&text).keeping_reset_of(outcome.quota.as_ref()));
            outcome.failure_kind = Some(FailureKind::Quota);
        } else if let Some(q) = quota::banner(&text) {
            outcome.quota = Some(q.keeping_reset_of(outcome.quota.as_ref()));
            outcome.failure_kind = Some(FailureKind::Quota);
        } else {
            outcome.failure_kind = Some(kind_of_label(label, &text));
        }
        return;
    }
    // Once the result is in, its totals are final; later lines never add to them.
    if outcome.completed {
        return;
    }
    let Some(message) = data.get("message") else {
        return;
    };
    // Tool calls: every `tool_use` block once (by its id), whichever line carries it.
    for block in message
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
    {
        if matches!(str_of(block, "type"), Some("tool_use" | "server_tool_use")) {
            let fresh = match str_of(block, "id") {
                Some(id) => {
                    outcome.tool_ids.len() < 100_000 && outcome.tool_ids.insert(id.to_string())
                }
                None => true,
            };
            if fresh {
                outcome.tool_calls = outcome.tool_calls.saturating_add(1);
            }
        }
    }
    // Each API call is one message id, repeated on every content-block line.
    let id = str_of(message, "id").map(String::from);
    if id.is_some() && id == outcome.last_message_id {
        return;
    }
    outcome.last_message_id = id;
    outcome.turns += 1;
    if let Some(u) = message.get("usage") {
        outcome.tokens = add(outcome.tokens, usage_of(u));
    }
}

/// `{"type":"system","subtype":"api_retry","attempt":3,"max_retries":10,"retry_delay_ms":…,
/// "error_status":401,"error":"authentication_failed"}` (Claude Code 2.1): the CLI retries a
/// failed API call with growing delays. A refused key (401/403) never heals, so it makes the
/// run hopeless at the first retry instead of minutes later.
fn observe_api_retry(outcome: &mut AgentOutcome, data: &Value) {
    let status = data.get("error_status").and_then(Value::as_u64);
    let error = str_of(data, "error").unwrap_or("unknown").to_string();
    let retry = super::ApiRetry {
        attempt: u64_of(data, "attempt"),
        max_retries: u64_of(data, "max_retries"),
        status,
        error: one_line(&error, 80),
    };
    if matches!(status, Some(401 | 403)) || error == "authentication_failed" {
        outcome.failure_kind = Some(FailureKind::Auth);
        outcome.hopeless = true;
        outcome.error = Some(format!(
            "authentication failed: the model API answered {} ({}); the CLI retries it {} times, so the attempt was stopped at once",
            status.map_or_else(|| "an error".to_string(), |s| s.to_string()),
            retry.error,
            retry.max_retries
        ));
    } else if status == Some(404) || error == "model_not_found" {
        outcome.failure_kind = Some(FailureKind::Model);
        outcome.hopeless = true;
        outcome.error = Some(format!(
            "the model API answered {} ({}): the profile's model does not exist for this key; the attempt was stopped at once",
            status.map_or_else(|| "an error".to_string(), |s| s.to_string()),
            retry.error
        ));
    } else {
        outcome.failure_kind = Some(kind_of_status(status));
    }
    outcome.api_retry = Some(retry);
}

/// The kind of failure an HTTP status from the model API means (404: the model does not
/// exist for this key, which no retry fixes).
fn kind_of_status(status: Option<u64>) -> FailureKind {
    status
        .and_then(FailureKind::of_status)
        .unwrap_or(FailureKind::Transient)
}

/// The synthetic assistant message's `error` label (Claude Code 2.1.332:
/// `authentication_failed` when not logged in, `model_not_found` on a 404, `rate_limit`,
/// `billing_error`, `server_error`, `unknown`), else the words of its text.
fn kind_of_label(label: &str, text: &str) -> FailureKind {
    match label {
        "authentication_failed" => FailureKind::Auth,
        "model_not_found" => FailureKind::Model,
        "rate_limit" | "billing_error" => FailureKind::Quota,
        _ => SPEC.kind_of_text(text).unwrap_or(FailureKind::Transient),
    }
}

/// Tokens from `modelUsage` (per model, camelCase), summed: after a `/compact` Claude
/// Code reports an all-zero `usage` on the result while `modelUsage` still holds the run's.
fn model_usage_of(m: &Value) -> TokenUsage {
    let Some(models) = m.as_object() else {
        return TokenUsage::default();
    };
    models.values().fold(TokenUsage::default(), |acc, u| {
        let cache_read = u64_of(u, "cacheReadInputTokens");
        add(
            acc,
            TokenUsage {
                input: u64_of(u, "inputTokens")
                    + u64_of(u, "cacheCreationInputTokens")
                    + cache_read,
                output: u64_of(u, "outputTokens"),
                cached_input: cache_read,
            },
        )
    })
}

fn observe_result(outcome: &mut AgentOutcome, data: &Value) {
    outcome.completed = true;
    let subtype = str_of(data, "subtype").unwrap_or("");
    let is_error = data
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let text = str_of(data, "result").unwrap_or("");
    if let Some(n) = data.get("num_turns").and_then(Value::as_u64) {
        outcome.turns = u32::try_from(n).unwrap_or(u32::MAX);
    }
    if let Some(c) = data.get("total_cost_usd").and_then(Value::as_f64) {
        outcome.cost_usd = Some(c);
    }
    if let Some(u) = data.get("usage").filter(|u| u.is_object()) {
        outcome.tokens = usage_of(u);
    }
    if outcome.tokens == TokenUsage::default() {
        if let Some(m) = data.get("modelUsage") {
            outcome.tokens = model_usage_of(m);
        }
    }
    if !text.is_empty() {
        outcome.final_message = Some(text.to_string());
    }
    // Claude has reported its usage limit as `subtype: success`, with and without is_error.
    let limit = if is_error || subtype != "success" {
        quota::in_error(text).or_else(|| quota::banner(text))
    } else {
        quota::banner(text)
    };
    if let Some(q) = limit {
        outcome.succeeded = false;
        outcome.error = Some(one_line(text, 500));
        outcome.quota = Some(q.keeping_reset_of(outcome.quota.as_ref()));
        outcome.failure_kind = Some(FailureKind::Quota);
        return;
    }
    if subtype == "success" && !is_error {
        outcome.succeeded = true;
        // The run finished, so an earlier limit event did not stop it.
        outcome.quota = None;
        outcome.failure_kind = None;
        return;
    }
    outcome.succeeded = false;
    // Claude Code 2.1 names the failed API call on the result line; without one, the
    // synthetic message's label (already read) or the result's words.
    if let Some(status) = data.get("api_error_status").and_then(Value::as_u64) {
        outcome.failure_kind = Some(kind_of_status(Some(status)));
    } else if outcome.failure_kind.is_none() {
        outcome.failure_kind = SPEC.kind_of_text(text);
    }
    let mut err = if text.is_empty() {
        error_text(data)
    } else {
        text.to_string()
    };
    if err.is_empty() {
        err = format!("result {subtype}");
    }
    outcome.error = Some(one_line(&format!("{subtype}: {err}"), 500));
}

/// The message of an error object: `errors[]`, `error.message`, `error` or `message`.
fn error_text(data: &Value) -> String {
    if let Some(errors) = data.get("errors").and_then(Value::as_array) {
        let joined: Vec<String> = errors
            .iter()
            .map(|e| e.as_str().map_or_else(|| e.to_string(), String::from))
            .collect();
        if !joined.is_empty() {
            return one_line(&joined.join("; "), SUMMARY_CHARS * 3);
        }
    }
    match data.get("error") {
        Some(Value::String(s)) => return s.clone(),
        Some(e @ Value::Object(_)) => {
            if let Some(m) = str_of(e, "message") {
                return m.to_string();
            }
        }
        _ => {}
    }
    str_of(data, "message").unwrap_or("").to_string()
}
