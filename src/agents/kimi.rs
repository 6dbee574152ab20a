//! Kimi Code CLI adapter: `kimi --print --output-format=stream-json -p PROMPT` (spec §8.3).
//!
//! Print mode implies auto-approval. Each stdout line is one message: assistant messages
//! `{"role":"assistant","content":…,"tool_calls":[…]}` (content a string or parts `text` /
//! `think`), tool results `{"role":"tool","tool_call_id":…,"content":…}`, plus notification,
//! plan and `/btw` objects. There is no result line and no token usage on stdout: the run is
//! complete when an assistant message without tool calls ends the stream, and the process
//! exit code (the runtime's) is authoritative. Tokens and cost stay unknown (zero / None).
//!
//! Errors: kimi-cli's print app writes provider and step-limit errors as a PLAIN TEXT line on
//! stdout (`Error code: 429 - {…}`, `Max number of steps reached: N`, `LLM not set`, …) and
//! exits non-zero. In stream-json mode everything the agent says is inside a JSON object, so a
//! non-JSON stdout line of those shapes can only come from the CLI itself; it is an `error`
//! event, and a 429/quota one is a quota hit.
//!
//! Architecture Invariant: pure; never touches disk, clock, network or Docker.

use regex::Regex;
use serde_json::{Map, Value};
use std::sync::LazyLock;

use super::common::{
    content_text, event, one_line, parse_object, str_of, tool_summary, u64_of, unknown,
    unknown_object, with_prompt,
};
use super::spec::{AgentSpec, BaseUrl, CredentialKind, FailureText, GatewaySpec, WireApi};
use super::{quota, AgentAdapter, AgentOutcome, Classified, Invocation};
use crate::domain::{AgentType, EventKind, RunSpec};

/// The plain-text lines kimi-cli's print app emits for its own errors.
static CLI_ERROR_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:Error code: \d{3}\b|Max number of steps reached|LLM not set|LLM not supported|Unknown error:|Interrupted by user|Connection error|Request timed out)",
    )
    .unwrap_or_else(|e| unreachable!("static regex: {e}"))
});

pub struct KimiAdapter;

/// Kimi Code CLI's descriptor.
pub static SPEC: AgentSpec = AgentSpec {
    agent_type: AgentType::Kimi,
    command: "kimi",
    event_protocol: "kimi-stream-json",
    invocation: "kimi --print --output-format=stream-json -p PROMPT",
    default_context_window: 256_000,
    auth_dir: ".kimi",
    // Providers and their keys, the OAuth token and the device id its OAuth flow is bound to.
    credential_files: &["config.toml", "credentials/kimi-code.json", "device_id"],
    sibling_files: &[],
    api_key_env: &["KIMI_API_KEY", "MOONSHOT_API_KEY"],
    base_url: BaseUrl::Env("KIMI_BASE_URL"),
    api_hosts: &[
        "api.moonshot.ai:443",
        "api.moonshot.cn:443",
        "api.kimi.com:443",
    ],
    gateway: Some(GatewaySpec {
        api: WireApi::OpenAiChat,
        credential_vars: &[
            ("KIMI_API_KEY", CredentialKind::ApiKey),
            ("MOONSHOT_API_KEY", CredentialKind::ApiKey),
        ],
        base_url_var: "KIMI_BASE_URL",
        login_files_hint: "",
    }),
    default_profile: true,
    version_args: &["--version"],
    // PyPI `kimi-cli` 1.52.0 is a stub that prints this and runs nothing.
    version_stub: Some((
        "no longer maintained",
        "use an image with a working Kimi CLI (docs/agents.md: kimi-cli 1.52.0 on PyPI is a stub)",
    )),
    tested_versions: None,
    login_hint: "run `kimi` and `/login` on the host (or set the API key the identity names)",
    // kimi-cli's print mode: `Error code: NNN - {…}` from the provider, `LLM not set`.
    failure_text: FailureText {
        auth: &[
            "error code: 401",
            "error code: 403",
            "invalid_authentication",
            "not logged in",
        ],
        quota: &[
            "error code: 429",
            "exceeded_current_quota",
            "rate_limit_reached",
        ],
        model: &[
            "error code: 404",
            "llm not set",
            "llm not supported",
            "model_not_found",
        ],
        transient: &["error code: 5", "connection error", "request timed out"],
    },
    profile_flags: &[],
};

impl AgentAdapter for KimiAdapter {
    fn spec(&self) -> &'static AgentSpec {
        &SPEC
    }

    fn invocation(&self, spec: &RunSpec, prompt: &str) -> Invocation {
        let mut argv = vec![
            spec.cli_command.clone(),
            "--print".to_string(),
            "--output-format=stream-json".to_string(),
        ];
        if let Some(model) = &spec.model {
            argv.push("--model".into());
            argv.push(model.clone());
        }
        if let Some(steps) = spec.max_turns {
            argv.push("--max-steps-per-turn".into());
            argv.push(steps.to_string());
        }
        // Print mode reads the command from stdin when `-p` is absent and stdin is not a TTY.
        with_prompt(argv, prompt, Some("-p"), None)
    }

    fn classify(&self, line: &str) -> Classified {
        match parse_object(line) {
            Ok(map) => classify_object(map),
            Err(note) => {
                let trimmed = line.trim();
                if trimmed.len() <= 64 * 1024 && CLI_ERROR_LINE.is_match(trimmed) {
                    Classified {
                        kind: EventKind::Error,
                        summary: one_line(&format!("error: {trimmed}"), 160),
                        data: serde_json::json!({ "raw": trimmed, "cli_error": true }),
                    }
                } else {
                    unknown(line, note)
                }
            }
        }
    }

    fn observe(&self, outcome: &mut AgentOutcome, event: &Classified) {
        let data = &event.data;
        if data.get("cli_error").and_then(Value::as_bool) == Some(true) {
            let text = str_of(data, "raw").unwrap_or("");
            outcome.completed = true;
            outcome.succeeded = false;
            outcome.error = Some(one_line(text, 500));
            outcome.failure_kind = SPEC.kind_of_text(text);
            if let Some(q) = quota::in_error(text) {
                outcome.quota = Some(q);
                outcome.failure_kind = Some(super::FailureKind::Quota);
            }
            return;
        }
        if str_of(data, "type") == Some("usage.record") {
            observe_usage_record(outcome, data);
            return;
        }
        if str_of(data, "role") != Some("assistant") {
            return;
        }
        outcome.turns += 1;
        let calls = data
            .get("tool_calls")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        outcome.tool_calls = outcome
            .tool_calls
            .saturating_add(u32::try_from(calls).unwrap_or(u32::MAX));
        let text = content_text(data.get("content").unwrap_or(&Value::Null));
        if !text.trim().is_empty() {
            outcome.final_message = Some(text);
        }
        let calls_tools = data
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty());
        // A message without tool calls ends the agent loop; one with calls reopens it.
        outcome.completed = !calls_tools;
        outcome.succeeded = !calls_tools && outcome.error.is_none();
    }
}

/// `{"type":"usage.record","model":…,"usageScope":"turn","usage":{"inputOther":…,"output":…,
/// "inputCacheRead":…,"inputCacheCreation":…}}`: one LLM step's tokens (Kimi Code's wire
/// record, also on stdout in some releases). Steps add up; a `session`-scoped record is a
/// running total of the same tokens and is not added again.
fn observe_usage_record(outcome: &mut AgentOutcome, data: &Value) {
    if str_of(data, "usageScope").is_some_and(|s| s != "turn") {
        return;
    }
    let Some(u) = data.get("usage").filter(|u| u.is_object()) else {
        return;
    };
    let cache_read = u64_of(u, "inputCacheRead");
    let t = &mut outcome.tokens;
    t.input = t
        .input
        .saturating_add(u64_of(u, "inputOther"))
        .saturating_add(u64_of(u, "inputCacheCreation"))
        .saturating_add(cache_read);
    t.cached_input = t.cached_input.saturating_add(cache_read);
    t.output = t.output.saturating_add(u64_of(u, "output"));
}

fn classify_object(map: Map<String, Value>) -> Classified {
    if map.get("type").and_then(Value::as_str) == Some("usage.record") {
        let u = map.get("usage").cloned().unwrap_or(Value::Null);
        let summary = format!(
            "usage: {} in ({} cached), {} out",
            u64_of(&u, "inputOther")
                + u64_of(&u, "inputCacheRead")
                + u64_of(&u, "inputCacheCreation"),
            u64_of(&u, "inputCacheRead"),
            u64_of(&u, "output")
        );
        return event(EventKind::Usage, summary, map);
    }
    let role = map.get("role").and_then(Value::as_str).unwrap_or("");
    match role {
        "assistant" => {
            let first_call = map
                .get("tool_calls")
                .and_then(Value::as_array)
                .and_then(|c| c.first())
                .cloned();
            if let Some(call) = first_call {
                let function = call.get("function").cloned().unwrap_or(Value::Null);
                let name = str_of(&function, "name").unwrap_or("tool").to_string();
                // Arguments are a JSON document inside a string.
                let args = match function.get("arguments") {
                    Some(Value::String(s)) => {
                        serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                    }
                    Some(v) => v.clone(),
                    None => Value::Null,
                };
                return event(EventKind::ToolCall, tool_summary(&name, &args), map);
            }
            let content = map.get("content").cloned().unwrap_or(Value::Null);
            let text = content_text(&content);
            if text.trim().is_empty() {
                let think = think_text(&content);
                return event(EventKind::Message, format!("thinking: {think}"), map);
            }
            event(EventKind::Message, format!("assistant: {text}"), map)
        }
        "tool" => {
            let text = content_text(map.get("content").unwrap_or(&Value::Null));
            event(EventKind::ToolResult, format!("tool result: {text}"), map)
        }
        "user" | "system" => {
            let text = content_text(map.get("content").unwrap_or(&Value::Null));
            event(EventKind::Message, format!("{role}: {text}"), map)
        }
        "" => {
            // Notifications, plan displays and /btw exchanges carry no role.
            let label = ["title", "category", "file_path"]
                .iter()
                .find_map(|k| map.get(*k).and_then(Value::as_str))
                .map(String::from);
            match label {
                Some(l) => event(EventKind::System, format!("notice: {l}"), map),
                None => unknown_object(map, "object without `role`".into()),
            }
        }
        other => {
            let note = format!("role `{}`", one_line(other, 40));
            unknown_object(map, note)
        }
    }
}

fn think_text(content: &Value) -> String {
    content
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter(|p| str_of(p, "type") == Some("think"))
                .filter_map(|p| str_of(p, "think"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}
