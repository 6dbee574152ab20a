//! Codex adapter: `codex exec --json … PROMPT` (spec §8.2).
//!
//! Stream: `thread.started`, `turn.started`, `item.started`/`item.updated`/`item.completed`
//! (item types agent_message, reasoning, command_execution, file_change, mcp_tool_call,
//! web_search, todo_list, error), `turn.completed {usage}`, `turn.failed {error}` and
//! `error {message}`.
//!
//! Tokens: `turn.completed.usage` is the THREAD's cumulative total (codex-rs `exec`
//! fills it from `ThreadTokenUsage.total`), so the latest one replaces the previous one; they
//! are never summed. `input` includes `cached_input`. Turns: the number of completed or
//! failed turns (one per `codex exec` run); Codex exposes no per-request count.
//!
//! A top-level `error` is also how Codex reports transient retries ("Reconnecting... 2/5"),
//! so a limit seen there is only kept if the turn then fails; `turn.completed` clears it.
//! A failed command inside a completed turn is not a failed turn.
//!
//! Architecture Invariant: pure; never touches disk, clock, network or Docker.

use regex::Regex;
use serde_json::{Map, Value};
use std::sync::LazyLock;

use super::common::{
    classify_line, content_text, event, one_line, str_of, tool_summary, u64_of, unknown_object,
    value_text, with_prompt,
};
use super::spec::{AgentSpec, BaseUrl, CredentialKind, FailureText, GatewaySpec, WireApi};
use super::{quota, AgentAdapter, AgentOutcome, ApiRetry, Classified, FailureKind, Invocation};
use crate::domain::{AgentType, EventKind, RunSpec, TokenUsage};

pub struct CodexAdapter;

/// Codex CLI's descriptor.
pub static SPEC: AgentSpec = AgentSpec {
    agent_type: AgentType::Codex,
    command: "codex",
    event_protocol: "codex-exec-json",
    invocation: "codex exec --json --dangerously-bypass-approvals-and-sandbox PROMPT",
    default_context_window: 272_000,
    auth_dir: ".codex",
    // ChatGPT login or API key, and the providers/model settings.
    credential_files: &["auth.json", "config.toml"],
    sibling_files: &[],
    api_key_env: &["OPENAI_API_KEY", "CODEX_API_KEY"],
    base_url: BaseUrl::CodexProvider,
    // API key (api.openai.com) and ChatGPT login (chatgpt.com, auth.openai.com).
    api_hosts: &[
        "api.openai.com:443",
        "chatgpt.com:443",
        "auth.openai.com:443",
    ],
    gateway: Some(GatewaySpec {
        api: WireApi::OpenAiResponses,
        credential_vars: &[
            ("CODEX_API_KEY", CredentialKind::ApiKey),
            ("OPENAI_API_KEY", CredentialKind::ApiKey),
        ],
        base_url_var: "OPENAI_BASE_URL",
        login_files_hint: "",
    }),
    default_profile: true,
    version_args: &["--version"],
    version_stub: None,
    tested_versions: Some(((0, 147, 0), (0, 147, 0))),
    login_hint: "run `codex login` on the host (or set the API key the identity names)",
    // codex-rs `CodexErr` display texts, as `codex exec --json` 0.147.0 prints them in
    // `error` and `turn.failed`.
    failure_text: FailureText {
        auth: &[
            "incorrect api key",
            "invalid_api_key",
            "missing environment variable",
            "could not be refreshed",
            "log out and sign in again",
            "not logged in",
        ],
        quota: &[
            "you've hit your usage limit",
            "you\u{2019}ve hit your usage limit",
            "quota exceeded. check your plan",
            "insufficient_quota",
            "to use codex with your chatgpt plan, upgrade",
            "usage_limit_reached",
            "last status: 429",
        ],
        model: &[
            "model_not_found",
            "does not exist or you do not have access",
            "is not supported when using codex",
            "unsupported model",
        ],
        transient: &[
            "currently experiencing high demand",
            "stream disconnected before completion",
            "selected model is at capacity",
            "connection failed",
            "error while reading the server response",
            "request timed out",
            "idle timeout waiting for sse",
        ],
    },
    profile_flags: &[],
};

impl AgentAdapter for CodexAdapter {
    fn spec(&self) -> &'static AgentSpec {
        &SPEC
    }

    fn invocation(&self, spec: &RunSpec, prompt: &str) -> Invocation {
        let mut argv = vec![
            spec.cli_command.clone(),
            "exec".to_string(),
            "--json".to_string(),
            // The container is the sandbox; Codex's own (Landlock/seccomp) sandbox cannot
            // start without capabilities we drop, and nobody can answer approvals.
            "--dangerously-bypass-approvals-and-sandbox".to_string(),
        ];
        if let Some(model) = &spec.model {
            argv.push("-m".into());
            argv.push(model.clone());
        }
        // `codex exec` has no turn limit flag; the deadline bounds the run instead. The
        // prompt `-` reads it from stdin.
        with_prompt(argv, prompt, None, Some("-"))
    }

    fn classify(&self, line: &str) -> Classified {
        classify_line(line, classify_object)
    }

    fn is_final(&self, event: &Classified) -> bool {
        matches!(
            str_of(&event.data, "type"),
            Some("turn.completed" | "turn.failed")
        )
    }

    fn observe(&self, outcome: &mut AgentOutcome, event: &Classified) {
        let data = &event.data;
        let ty = str_of(data, "type");
        if ty == Some("error") {
            let msg = str_of(data, "message").unwrap_or("");
            if let Some(retry) = reconnecting(msg) {
                observe_reconnect(outcome, retry);
                return;
            }
        }
        // Anything else means the CLI got past the failing request.
        outcome.api_retry = None;
        match ty {
            Some("turn.completed") => {
                outcome.completed = true;
                outcome.succeeded = true;
                outcome.turns += 1;
                outcome.quota = None;
                outcome.failure_kind = None;
                outcome.hopeless = false;
                if let Some(u) = data.get("usage").filter(|u| u.is_object()) {
                    outcome.tokens = TokenUsage {
                        input: u64_of(u, "input_tokens"),
                        output: u64_of(u, "output_tokens"),
                        cached_input: u64_of(u, "cached_input_tokens"),
                    };
                }
            }
            Some("turn.failed") => {
                outcome.completed = true;
                outcome.succeeded = false;
                outcome.turns += 1;
                let msg = turn_failed_text(data);
                observe_error_text(outcome, &msg);
                // A bare turn.failed after a limit `error` keeps that limit.
                if !msg.is_empty() || outcome.error.is_none() {
                    outcome.error = Some(one_line(&msg, 500));
                }
            }
            Some("error") => {
                let msg = str_of(data, "message").unwrap_or("").to_string();
                observe_error_text(outcome, &msg);
                outcome.error = Some(one_line(&msg, 500));
            }
            Some("item.started" | "item.updated" | "item.completed") => {
                let item = data.get("item").unwrap_or(&Value::Null);
                count_tool_call(outcome, item);
                if ty == Some("item.completed") && item_type(item) == Some("agent_message") {
                    let text = item_text(item);
                    if !text.is_empty() {
                        outcome.final_message = Some(text);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Tool items: a shell command, a patch, an MCP call, a web search. Codex 0.14x reports a
/// command as `item.started` then `item.completed`, but a patch or a search often only as
/// `item.completed`; each item id is counted once.
fn count_tool_call(outcome: &mut AgentOutcome, item: &Value) {
    let tool = matches!(
        item_type(item),
        Some(
            "command_execution"
                | "file_change"
                | "mcp_tool_call"
                | "web_search"
                | "collab_tool_call"
        )
    );
    if !tool {
        return;
    }
    match str_of(item, "id") {
        Some(id) => {
            if outcome.tool_ids.len() < 100_000 && outcome.tool_ids.insert(id.to_string()) {
                outcome.tool_calls = outcome.tool_calls.saturating_add(1);
            }
        }
        None => outcome.tool_calls = outcome.tool_calls.saturating_add(1),
    }
}

/// `Reconnecting... 2/5 (unexpected status 401 Unauthorized: …)`: Codex retries a failed
/// request (its `stream_max_retries`, 5 by default) and says so in a top-level `error`.
struct Reconnect<'a> {
    attempt: u64,
    max: u64,
    cause: &'a str,
}

fn reconnecting(msg: &str) -> Option<Reconnect<'_>> {
    let c = RECONNECTING.captures(msg)?;
    Some(Reconnect {
        attempt: c[1].parse().ok()?,
        max: c[2].parse().ok()?,
        cause: c.get(3).map_or("", |m| m.as_str()),
    })
}

static RECONNECTING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*Reconnecting\.\.\.\s*(\d+)/(\d+)\s*(?:\((.*)\))?\s*$")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// A retry is not a failure yet, unless its cause never heals (a refused key, a model the
/// endpoint does not serve): then the run is hopeless at the first retry instead of after
/// all of them.
fn observe_reconnect(outcome: &mut AgentOutcome, r: Reconnect<'_>) {
    let (kind, status) = kind_of_text(r.cause);
    outcome.api_retry = Some(ApiRetry {
        attempt: r.attempt,
        max_retries: r.max,
        status,
        error: one_line(r.cause, 80),
    });
    match kind {
        Some(k @ (FailureKind::Auth | FailureKind::Model)) => {
            outcome.failure_kind = Some(k);
            outcome.hopeless = true;
            let what = if k == FailureKind::Auth {
                "authentication failed"
            } else {
                "the model or endpoint cannot serve this run"
            };
            outcome.error = Some(one_line(
                &format!(
                    "{what}: {}; the CLI retries it {} times, so the attempt was stopped at once",
                    r.cause, r.max
                ),
                500,
            ));
        }
        Some(k) => outcome.failure_kind = Some(k),
        None => outcome.failure_kind = Some(FailureKind::Transient),
    }
}

/// An error Codex reported for the turn: its kind, and a usage limit when it is one.
fn observe_error_text(outcome: &mut AgentOutcome, msg: &str) {
    let (kind, _) = kind_of_text(msg);
    if kind == Some(FailureKind::Quota) {
        outcome.quota = Some(quota::hit(msg));
    } else if let Some(q) = quota::in_error(msg).filter(|_| kind.is_none()) {
        outcome.quota = Some(q);
    }
    if outcome.quota.is_some() && kind.is_none() {
        outcome.failure_kind = Some(FailureKind::Quota);
    } else if let Some(k) = kind {
        outcome.failure_kind = Some(k);
    }
}

/// `unexpected status 401 Unauthorized: …` (UnexpectedResponseError) and
/// `exceeded retry limit, last status: 429 …` (RetryLimitReachedError).
static STATUS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:unexpected status|last status:?)\s+(\d{3})\b")
        .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

/// The kind of a Codex error message (codex-rs `CodexErr` display texts), and the HTTP
/// status it names. Only ever applied to Codex's own `error` / `turn.failed` texts.
pub fn kind_of_text(msg: &str) -> (Option<FailureKind>, Option<u64>) {
    let status = STATUS.captures(msg).and_then(|c| c[1].parse::<u64>().ok());
    let by_text = SPEC.kind_of_text(msg);
    // A usage-limit text is a limit whatever status it carries; else the status decides.
    let kind = match by_text {
        Some(FailureKind::Quota) => by_text,
        _ => status.and_then(FailureKind::of_status).or(by_text),
    };
    (kind, status)
}

fn turn_failed_text(data: &Value) -> String {
    match data.get("error") {
        Some(Value::String(s)) => s.clone(),
        Some(e) => str_of(e, "message").unwrap_or("").to_string(),
        None => String::new(),
    }
}

/// The item's type; early 0.4x releases called it `item_type`.
fn item_type(item: &Value) -> Option<&str> {
    str_of(item, "type").or_else(|| str_of(item, "item_type"))
}

fn item_text(item: &Value) -> String {
    match item.get("text") {
        Some(t) => value_text(t),
        None => content_text(item.get("content").unwrap_or(&Value::Null)),
    }
}

fn classify_object(map: Map<String, Value>) -> Classified {
    let ty = map
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match ty.as_str() {
        "thread.started" => {
            let id = map.get("thread_id").and_then(Value::as_str).unwrap_or("?");
            event(EventKind::System, format!("thread started: {id}"), map)
        }
        "turn.started" => event(EventKind::System, "turn started".into(), map),
        "turn.completed" => {
            let u = map.get("usage").cloned().unwrap_or(Value::Null);
            let summary = format!(
                "turn completed: {} in ({} cached), {} out",
                u64_of(&u, "input_tokens"),
                u64_of(&u, "cached_input_tokens"),
                u64_of(&u, "output_tokens")
            );
            event(EventKind::Result, summary, map)
        }
        "turn.failed" => {
            let msg = turn_failed_text(&Value::Object(map.clone()));
            event(EventKind::Result, format!("turn failed: {msg}"), map)
        }
        "error" => {
            let msg = map.get("message").and_then(Value::as_str).unwrap_or("");
            let summary = format!("error: {msg}");
            event(EventKind::Error, summary, map)
        }
        "item.started" | "item.updated" | "item.completed" => classify_item(&ty, map),
        "" => unknown_object(map, "no `type` field".into()),
        other => {
            let note = format!("type `{}`", one_line(other, 40));
            unknown_object(map, note)
        }
    }
}

fn classify_item(ty: &str, map: Map<String, Value>) -> Classified {
    let item = map.get("item").cloned().unwrap_or(Value::Null);
    let completed = ty == "item.completed";
    match item_type(&item).unwrap_or("") {
        "agent_message" => {
            let text = item_text(&item);
            event(EventKind::Message, format!("assistant: {text}"), map)
        }
        "reasoning" => {
            let text = item_text(&item);
            event(EventKind::Message, format!("thinking: {text}"), map)
        }
        "command_execution" => {
            let cmd = item.get("command").map(value_text).unwrap_or_default();
            if completed {
                let code = item
                    .get("exit_code")
                    .and_then(Value::as_i64)
                    .map_or_else(|| "?".to_string(), |c| c.to_string());
                let status = str_of(&item, "status").unwrap_or("");
                event(
                    EventKind::ToolResult,
                    format!("exit {code} ({status}): {cmd}"),
                    map,
                )
            } else {
                event(EventKind::ToolCall, format!("shell: {cmd}"), map)
            }
        }
        "file_change" => {
            let changes: Vec<String> = item
                .get("changes")
                .and_then(Value::as_array)
                .map(|cs| {
                    cs.iter()
                        .map(|c| {
                            format!(
                                "{} {}",
                                str_of(c, "kind").unwrap_or("?"),
                                str_of(c, "path").unwrap_or("?")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let status = str_of(&item, "status").unwrap_or("");
            let kind = if completed {
                EventKind::ToolResult
            } else {
                EventKind::ToolCall
            };
            event(
                kind,
                format!("patch ({status}): {}", changes.join(", ")),
                map,
            )
        }
        "mcp_tool_call" => {
            let name = format!(
                "{}.{}",
                str_of(&item, "server").unwrap_or("mcp"),
                str_of(&item, "tool").unwrap_or("?")
            );
            if completed {
                let status = str_of(&item, "status").unwrap_or("");
                event(EventKind::ToolResult, format!("{name} ({status})"), map)
            } else {
                let args = item.get("arguments").cloned().unwrap_or(Value::Null);
                event(EventKind::ToolCall, tool_summary(&name, &args), map)
            }
        }
        "web_search" => {
            let q = str_of(&item, "query").unwrap_or("");
            event(EventKind::ToolCall, format!("web_search: {q}"), map)
        }
        "todo_list" => {
            let n = item
                .get("items")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            event(EventKind::Message, format!("plan: {n} items"), map)
        }
        "error" => {
            let msg = str_of(&item, "message").unwrap_or("");
            event(EventKind::Error, format!("error item: {msg}"), map)
        }
        other => {
            let note = format!("{ty} item `{}`", one_line(other, 40));
            event(EventKind::Unknown, format!("unknown: {note}"), map)
        }
    }
}
