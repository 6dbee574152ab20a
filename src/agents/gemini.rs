//! Gemini CLI adapter: `gemini -p PROMPT --output-format stream-json --yolo` (spec §8.3).
//!
//! Stream (gemini-cli `packages/core/src/output/types.ts`): `init {session_id, model}`,
//! `message {role, content, delta?}` (assistant text arrives as deltas), `tool_use {tool_name,
//! tool_id, parameters}`, `tool_result {tool_id, status, output?, error?}`, `error {severity,
//! message}` (non-fatal) and `result {status, error?, stats}` with `stats.input_tokens`
//! (including `cached`), `output_tokens`, `total_tokens`, `duration_ms`, `tool_calls`.
//!
//! Tokens are the result's `stats` (session totals). Turns: runs of assistant messages (each
//! model response streams as consecutive deltas). Gemini reports no cost. A quota `error`
//! event is only kept when the run does not then succeed (the CLI retries and may fall back
//! to another model).
//!
//! Architecture Invariant: pure; never touches disk, clock, network or Docker.

use serde_json::{Map, Value};

use super::common::{
    classify_line, event, one_line, str_of, tool_summary, u64_of, unknown_object, value_text,
    with_prompt,
};
use super::spec::{AgentSpec, BaseUrl, CredentialKind, FailureText, GatewaySpec, WireApi};
use super::{quota, AgentAdapter, AgentOutcome, Classified, Invocation};
use crate::domain::{AgentType, EventKind, RunSpec, TokenUsage};

pub struct GeminiAdapter;

/// Gemini CLI's descriptor.
pub static SPEC: AgentSpec = AgentSpec {
    agent_type: AgentType::Gemini,
    command: "gemini",
    event_protocol: "gemini-stream-json",
    invocation: "gemini -p PROMPT --output-format stream-json --yolo",
    default_context_window: 1_048_576,
    auth_dir: ".gemini",
    // OAuth tokens, the selected auth type and the active account.
    credential_files: &["oauth_creds.json", "settings.json", "google_accounts.json"],
    sibling_files: &[],
    api_key_env: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
    base_url: BaseUrl::Env("GOOGLE_GEMINI_BASE_URL"),
    // API key (generativelanguage), Google login (Code Assist, OAuth token refresh).
    api_hosts: &[
        "generativelanguage.googleapis.com:443",
        "cloudcode-pa.googleapis.com:443",
        "oauth2.googleapis.com:443",
    ],
    gateway: Some(GatewaySpec {
        api: WireApi::Gemini,
        credential_vars: &[
            ("GEMINI_API_KEY", CredentialKind::ApiKey),
            ("GOOGLE_API_KEY", CredentialKind::ApiKey),
        ],
        base_url_var: "GOOGLE_GEMINI_BASE_URL",
        login_files_hint: "",
    }),
    default_profile: true,
    version_args: &["--version"],
    version_stub: None,
    tested_versions: Some(((0, 31, 0), (0, 31, u64::MAX))),
    login_hint: "run `gemini` and log in on the host (or set the API key the identity names)",
    failure_text: FailureText {
        auth: &[
            "api key not valid",
            "unauthenticated",
            "permission_denied",
            "login required",
        ],
        quota: &["resource_exhausted", "quota exceeded", "terminalquotaerror"],
        model: &["model_not_found", "is not found for api version"],
        transient: &["internal error", "unavailable", "deadline_exceeded"],
    },
    profile_flags: &[],
};

/// Marks, in `AgentOutcome::last_message_id`, that the previous event was assistant text.
const IN_ASSISTANT: &str = "gemini:assistant";

impl AgentAdapter for GeminiAdapter {
    fn spec(&self) -> &'static AgentSpec {
        &SPEC
    }

    fn invocation(&self, spec: &RunSpec, prompt: &str) -> Invocation {
        let mut argv = vec![
            spec.cli_command.clone(),
            "--output-format".to_string(),
            "stream-json".to_string(),
            // Auto-approve every tool call; the container is the sandbox.
            "--yolo".to_string(),
        ];
        if let Some(model) = &spec.model {
            argv.push("-m".into());
            argv.push(model.clone());
        }
        // Without a TTY the CLI runs headless and reads the prompt from stdin.
        with_prompt(argv, prompt, Some("-p"), None)
    }

    fn classify(&self, line: &str) -> Classified {
        classify_line(line, classify_object)
    }

    fn is_final(&self, event: &Classified) -> bool {
        matches!(str_of(&event.data, "type"), Some("result"))
    }

    fn observe(&self, outcome: &mut AgentOutcome, event: &Classified) {
        let data = &event.data;
        let ty = str_of(data, "type");
        let was_assistant = outcome.last_message_id.as_deref() == Some(IN_ASSISTANT);
        if !(ty == Some("message") && str_of(data, "role") == Some("assistant")) {
            outcome.last_message_id = None;
        }
        match ty {
            Some("message") if str_of(data, "role") == Some("assistant") => {
                let text = str_of(data, "content").unwrap_or("");
                if was_assistant {
                    let mut joined = outcome.final_message.take().unwrap_or_default();
                    joined.push_str(text);
                    outcome.final_message = Some(joined);
                } else {
                    outcome.turns += 1;
                    outcome.final_message = Some(text.to_string());
                }
                outcome.last_message_id = Some(IN_ASSISTANT.to_string());
            }
            Some("tool_use") => outcome.tool_calls = outcome.tool_calls.saturating_add(1),
            Some("error") => {
                let msg = str_of(data, "message").unwrap_or("");
                if str_of(data, "severity") != Some("warning") {
                    outcome.error = Some(one_line(msg, 500));
                }
                if let Some(q) = quota::in_error(msg) {
                    outcome.quota = Some(q);
                }
            }
            Some("result") => {
                outcome.completed = true;
                if let Some(stats) = data.get("stats").filter(|s| s.is_object()) {
                    outcome.tokens = TokenUsage {
                        input: u64_of(stats, "input_tokens"),
                        output: u64_of(stats, "output_tokens"),
                        cached_input: u64_of(stats, "cached"),
                    };
                }
                if str_of(data, "status") == Some("success") {
                    outcome.succeeded = true;
                    outcome.quota = None;
                } else {
                    outcome.succeeded = false;
                    let err = data.get("error").unwrap_or(&Value::Null);
                    let msg = str_of(err, "message")
                        .map(String::from)
                        .unwrap_or_else(|| value_text(err));
                    let kind = str_of(err, "type").unwrap_or("");
                    let text = format!("{kind} {msg}");
                    // Gemini names quota failures in the error type (e.g. `TerminalQuotaError`).
                    if kind.to_ascii_lowercase().contains("quota")
                        || quota::in_error(&text).is_some()
                    {
                        outcome.quota = Some(quota::hit(if msg.is_empty() { &text } else { &msg }));
                        outcome.failure_kind = Some(super::FailureKind::Quota);
                    } else {
                        outcome.failure_kind = SPEC.kind_of_text(&text);
                    }
                    if !msg.is_empty() {
                        outcome.error = Some(one_line(&msg, 500));
                    } else if outcome.error.is_none() {
                        outcome.error = Some("result status error".into());
                    }
                }
            }
            _ => {}
        }
    }
}

fn classify_object(map: Map<String, Value>) -> Classified {
    let ty = map.get("type").and_then(Value::as_str).unwrap_or("");
    match ty {
        "init" => {
            let model = map.get("model").and_then(Value::as_str).unwrap_or("?");
            event(EventKind::System, format!("init: model {model}"), map)
        }
        "message" => {
            let role = map.get("role").and_then(Value::as_str).unwrap_or("?");
            let text = map.get("content").map(value_text).unwrap_or_default();
            let role = if role == "assistant" {
                "assistant"
            } else {
                role
            };
            event(EventKind::Message, format!("{role}: {text}"), map)
        }
        "tool_use" => {
            let name = map
                .get("tool_name")
                .and_then(Value::as_str)
                .unwrap_or("tool");
            let params = map.get("parameters").cloned().unwrap_or(Value::Null);
            event(EventKind::ToolCall, tool_summary(name, &params), map)
        }
        "tool_result" => {
            let status = map.get("status").and_then(Value::as_str).unwrap_or("?");
            let body = match map.get("output") {
                Some(o) => value_text(o),
                None => map
                    .get("error")
                    .and_then(|e| e.get("message"))
                    .map(value_text)
                    .unwrap_or_default(),
            };
            event(EventKind::ToolResult, format!("tool {status}: {body}"), map)
        }
        "error" => {
            let sev = map
                .get("severity")
                .and_then(Value::as_str)
                .unwrap_or("error");
            let msg = map.get("message").and_then(Value::as_str).unwrap_or("");
            event(EventKind::Error, format!("{sev}: {msg}"), map)
        }
        "result" => {
            let status = map.get("status").and_then(Value::as_str).unwrap_or("?");
            let stats = map.get("stats").cloned().unwrap_or(Value::Null);
            let summary = format!(
                "result: {status}, {} tokens, {} tool calls",
                u64_of(&stats, "total_tokens"),
                u64_of(&stats, "tool_calls")
            );
            event(EventKind::Result, summary, map)
        }
        "" => unknown_object(map, "no `type` field".into()),
        other => {
            let note = format!("type `{}`", one_line(other, 40));
            unknown_object(map, note)
        }
    }
}
