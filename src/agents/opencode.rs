//! OpenCode adapter: `opencode run --format json [-m PROVIDER/MODEL] PROMPT`.
//!
//! Built from OpenCode's own source (anomalyco/opencode, formerly sst/opencode:
//! `packages/opencode/src/cli/cmd/run.ts` and `src/session/message-v2.ts`) and public
//! recordings of the real CLI (tests/fixtures/PROVENANCE.md). `--format json` writes one
//! object per line, `{"type", "timestamp", "sessionID", …}`, projected from the session's
//! bus events:
//! - `step_start {part: StepStartPart}`: one model request begins;
//! - `text {part: TextPart}`: a finished text part (`part.text`);
//! - `reasoning {part}`: only with `--thinking`;
//! - `tool_use {part: ToolPart}`: a tool call that finished, `part.state.status`
//!   `completed` (with `output`) or `error` (with `error`), one line per call (`callID`);
//! - `step_finish {part: StepFinishPart}`: the request ended, `reason` (`tool-calls` when
//!   the loop goes on, `stop` when the agent is done), `cost` in dollars and that step's
//!   `tokens {input, output, reasoning, cache {read, write}}`;
//! - `error {error: {name, data: {message, statusCode?, isRetryable?, responseHeaders?}}}`:
//!   the session failed (`APIError`, `ProviderAuthError`, `UnknownError`,
//!   `ContextOverflowError`, …) or the prompt was refused (`ProviderModelNotFoundError`);
//! - `done {reason: "idle"}`: recent releases only, once the session is idle.
//!
//! Tokens and cost are per step and add up. `tokens.input` excludes the cache (the
//! recordings' `total` is input + output + reasoning + cache read + cache write), so input
//! here is input + cache read + cache write with the cache read as `cached_input`, and
//! output is output + reasoning (as Codex and Claude bill it). Turns: one per step.
//!
//! Completion is provisional, as for Kimi: a `step_finish` that is not `tool-calls`
//! completes the run, a new step or tool call reopens it, an `error` fails it. Only `done`
//! is the CLI's one final report ([`AgentAdapter::is_final`]); releases without it have
//! none. OpenCode retries retryable API errors itself and prints nothing while it does.
//!
//! Architecture Invariant: pure; never touches disk, clock, network or Docker.

use serde_json::{Map, Value};

use super::common::{
    classify_line, event, one_line, str_of, tool_summary, u64_of, unknown_object, value_text,
    with_prompt,
};
use super::quota::{self, ResetHint};
use super::spec::{AgentSpec, BaseUrl, FailureText, ProfileFlag};
use super::{AgentAdapter, AgentOutcome, Classified, FailureKind, Invocation};
use crate::domain::{AgentType, EventKind, RunSpec};

pub struct OpenCodeAdapter;

/// OpenCode's descriptor.
pub static SPEC: AgentSpec = AgentSpec {
    agent_type: AgentType::OpenCode,
    command: "opencode",
    event_protocol: "opencode-run-json",
    invocation: "opencode run --format json PROMPT",
    // The CLI's default model is the provider's; Claude's and GPT-5's windows are 200k+.
    default_context_window: 200_000,
    // `Global.Path.data` (XDG data home): `auth.json` holds the keys and OAuth logins
    // `opencode auth login` stores.
    auth_dir: ".local/share/opencode",
    credential_files: &["auth.json"],
    sibling_files: &[],
    // Provider keys it reads from the environment (models.dev `env` of each provider).
    api_key_env: &["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENCODE_API_KEY"],
    // A provider's `options.baseURL` in `opencode.json`.
    base_url: BaseUrl::ConfigFile("opencode.json"),
    // The model catalogue (models.dev) at start, OpenCode Zen, and the two main providers.
    api_hosts: &[
        "models.dev:443",
        "opencode.ai:443",
        "api.anthropic.com:443",
        "api.openai.com:443",
    ],
    // It speaks to whichever provider its config names: the gateway cannot stand in.
    gateway: None,
    // Never run here against the real binary (npm only): profiles name it explicitly.
    default_profile: false,
    version_args: &["--version"],
    version_stub: None,
    tested_versions: None,
    login_hint: "run `opencode auth login` on the host (or set the API key the identity names)",
    // The `name`s and `data.message`s of its errors (message-v2.ts, provider.ts) and the
    // provider texts they carry.
    failure_text: FailureText {
        auth: &[
            "providerautherror",
            "invalid api key",
            "invalid x-api-key",
            "incorrect api key",
            "authentication_error",
            "api key is missing",
        ],
        quota: &[
            "usage limit",
            "rate limit",
            "rate_limit",
            "insufficient_quota",
            "quota exceeded",
        ],
        model: &[
            "providermodelnotfounderror",
            "model not found",
            "model_not_found",
            "not_found_error",
            "does not exist or you do not have access",
        ],
        transient: &[
            "overloaded",
            "server_error",
            "internal server error",
            "service unavailable",
            "econnreset",
            "timed out",
        ],
    },
    // `opencode run`'s own options (packages/opencode/src/cli/cmd/run.ts): `--auto`
    // approves every permission the config does not deny (without it `run` rejects what
    // would prompt: edits and commands the config leaves at `ask`); `--agent NAME`;
    // `--variant EFFORT` (provider reasoning effort); `--thinking` (adds `reasoning` lines).
    profile_flags: &[
        ProfileFlag {
            flag: "--auto",
            value: false,
        },
        ProfileFlag {
            flag: "--agent",
            value: true,
        },
        ProfileFlag {
            flag: "--variant",
            value: true,
        },
        ProfileFlag {
            flag: "--thinking",
            value: false,
        },
    ],
};

impl AgentAdapter for OpenCodeAdapter {
    fn spec(&self) -> &'static AgentSpec {
        &SPEC
    }

    fn invocation(&self, spec: &RunSpec, prompt: &str) -> Invocation {
        let mut argv = vec![
            spec.cli_command.clone(),
            "run".to_string(),
            "--format".to_string(),
            "json".to_string(),
        ];
        if let Some(model) = &spec.model {
            argv.push("-m".into());
            argv.push(model.clone());
        }
        // The profile's flags (checked against `profile_flags` when the config loaded).
        argv.extend(spec.args.iter().cloned());
        // No turn-limit flag; the deadline bounds the run. With no message, `run` takes
        // the message from piped stdin (`resolveRunInput`).
        with_prompt(argv, prompt, None, None)
    }

    fn classify(&self, line: &str) -> Classified {
        classify_line(line, classify_object)
    }

    fn is_final(&self, event: &Classified) -> bool {
        str_of(&event.data, "type") == Some("done")
    }

    fn observe(&self, outcome: &mut AgentOutcome, event: &Classified) {
        let data = &event.data;
        let part = data.get("part").unwrap_or(&Value::Null);
        match str_of(data, "type") {
            Some("step_start") => outcome.completed = false,
            Some("text") => {
                let text = str_of(part, "text").unwrap_or("");
                if !text.trim().is_empty() {
                    outcome.final_message = Some(text.to_string());
                }
            }
            Some("tool_use") => {
                outcome.completed = false;
                let id = str_of(part, "callID")
                    .or_else(|| str_of(part, "id"))
                    .map(String::from);
                let new = match id {
                    Some(id) => outcome.tool_ids.insert(format!("opencode:{id}")),
                    None => true,
                };
                if new {
                    outcome.tool_calls = outcome.tool_calls.saturating_add(1);
                }
            }
            Some("step_finish") => observe_step_finish(outcome, part),
            Some("error") => observe_error(outcome, data.get("error").unwrap_or(&Value::Null)),
            Some("done") if outcome.error.is_none() => {
                outcome.completed = true;
                outcome.succeeded = true;
            }
            _ => {}
        }
    }
}

/// One step's tokens and cost add to the run's; a step that does not end in tool calls
/// completes it.
fn observe_step_finish(outcome: &mut AgentOutcome, part: &Value) {
    outcome.turns = outcome.turns.saturating_add(1);
    if let Some(t) = part.get("tokens").filter(|t| t.is_object()) {
        let cache = t.get("cache").unwrap_or(&Value::Null);
        let (read, write) = (u64_of(cache, "read"), u64_of(cache, "write"));
        let u = &mut outcome.tokens;
        u.input = u.input.saturating_add(
            u64_of(t, "input")
                .saturating_add(read)
                .saturating_add(write),
        );
        u.cached_input = u.cached_input.saturating_add(read);
        u.output = u
            .output
            .saturating_add(u64_of(t, "output").saturating_add(u64_of(t, "reasoning")));
    }
    if let Some(cost) = part.get("cost").and_then(Value::as_f64) {
        outcome.cost_usd = Some(outcome.cost_usd.unwrap_or(0.0) + cost);
    }
    let reason = str_of(part, "reason").unwrap_or("");
    if reason == "tool-calls" {
        outcome.completed = false;
        return;
    }
    outcome.completed = true;
    // `length` and `content-filter` end the step without the agent finishing its work.
    if matches!(reason, "length" | "content-filter" | "error") {
        outcome.succeeded = false;
        if outcome.error.is_none() {
            outcome.error = Some(format!("the model's step ended with `{reason}`"));
        }
    } else {
        outcome.succeeded = outcome.error.is_none();
    }
}

/// `error.name` and `error.data` (`message`, `statusCode`, `responseHeaders`): the kind from
/// the name or the HTTP status, else from the CLI's words.
fn observe_error(outcome: &mut AgentOutcome, error: &Value) {
    let name = str_of(error, "name").unwrap_or("");
    let data = error.get("data").unwrap_or(&Value::Null);
    let message = str_of(data, "message")
        .or_else(|| str_of(error, "message"))
        .map(String::from)
        .unwrap_or_else(|| value_text(data));
    let status = data.get("statusCode").and_then(Value::as_u64);
    let text = format!("{name}: {message}");
    let kind = match name {
        "ProviderAuthError" => Some(FailureKind::Auth),
        "ProviderModelNotFoundError" => Some(FailureKind::Model),
        // The conversation outgrew the model, or the run was stopped: the agent's, not a
        // provider fault.
        "ContextOverflowError" | "MessageOutputLengthError" | "MessageAbortedError" => None,
        _ => status
            .and_then(FailureKind::of_status)
            .or_else(|| SPEC.kind_of_text(&text)),
    };
    outcome.completed = true;
    outcome.succeeded = false;
    outcome.failure_kind = kind;
    outcome.error = Some(one_line(if message.is_empty() { name } else { &text }, 500));
    if kind == Some(FailureKind::Quota) {
        let mut hit = quota::hit(if message.is_empty() { &text } else { &message });
        if hit.reset.is_none() {
            if let Some((raw, reset)) = header_reset(data.get("responseHeaders")) {
                hit.resets_at = Some(raw);
                hit.reset = Some(reset);
            }
        }
        outcome.quota = Some(hit);
    }
}

/// The reset an `APIError`'s response headers name: `retry-after` (seconds or an HTTP date),
/// else an `*-ratelimit-*-reset` epoch.
fn header_reset(headers: Option<&Value>) -> Option<(String, ResetHint)> {
    let headers = headers?.as_object()?;
    let get = |want: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(want))
            .and_then(|(_, v)| v.as_str())
    };
    if let Some(raw) = get("retry-after") {
        if let Ok(seconds) = raw.trim().parse::<f64>() {
            if seconds.is_finite() && (0.0..=366.0 * 86_400.0).contains(&seconds) {
                let millis = (seconds * 1000.0).round() as u64;
                return Some((raw.to_string(), ResetHint::After { millis }));
            }
        }
        if let Ok(at) = chrono::DateTime::parse_from_rfc2822(raw.trim()) {
            let seconds = at.timestamp();
            return Some((raw.to_string(), ResetHint::Epoch { seconds }));
        }
    }
    headers.iter().find_map(|(k, v)| {
        let k = k.to_ascii_lowercase();
        let raw = v.as_str()?;
        (k.contains("ratelimit") && k.ends_with("-reset"))
            .then(|| quota::raw_reset_hint(raw))
            .flatten()
            .map(|hint| (raw.to_string(), hint))
    })
}

fn classify_object(map: Map<String, Value>) -> Classified {
    let ty = map.get("type").and_then(Value::as_str).unwrap_or("");
    let part = map.get("part").cloned().unwrap_or(Value::Null);
    match ty {
        "step_start" => event(EventKind::System, "step start".into(), map),
        "text" => {
            let text = str_of(&part, "text").unwrap_or("");
            event(EventKind::Message, format!("assistant: {text}"), map)
        }
        "reasoning" => {
            let text = str_of(&part, "text").unwrap_or("");
            event(EventKind::Message, format!("thinking: {text}"), map)
        }
        "tool_use" => {
            let tool = str_of(&part, "tool").unwrap_or("tool");
            let state = part.get("state").unwrap_or(&Value::Null);
            let input = state.get("input").cloned().unwrap_or(Value::Null);
            let status = str_of(state, "status").unwrap_or("?");
            let summary = format!("tool {} ({status})", tool_summary(tool, &input));
            event(EventKind::ToolCall, summary, map)
        }
        "step_finish" => {
            let reason = str_of(&part, "reason").unwrap_or("?");
            let tokens = part.get("tokens").unwrap_or(&Value::Null);
            let total =
                u64_of(tokens, "input") + u64_of(tokens, "output") + u64_of(tokens, "reasoning");
            let summary = format!("step finished: {reason}, {total} tokens");
            event(EventKind::Usage, summary, map)
        }
        "error" => {
            let err = map.get("error").cloned().unwrap_or(Value::Null);
            let name = str_of(&err, "name").unwrap_or("error");
            let msg = err
                .get("data")
                .and_then(|d| str_of(d, "message"))
                .unwrap_or("");
            event(EventKind::Error, format!("{name}: {msg}"), map)
        }
        "done" => event(EventKind::Result, "done: session idle".into(), map),
        "" => unknown_object(map, "object without a `type`".into()),
        other => {
            let note = format!("OpenCode event `{other}`");
            unknown_object(map, note)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::fold;

    fn run(lines: &[&str]) -> AgentOutcome {
        let a = OpenCodeAdapter;
        let mut o = AgentOutcome::default();
        let mut fin = false;
        for l in lines {
            fold(&a, &mut o, &mut fin, l);
        }
        o
    }

    #[test]
    fn steps_add_up_and_a_stop_completes() {
        let o = run(&[
            r#"{"type":"step_start","timestamp":1,"sessionID":"s","part":{"type":"step-start"}}"#,
            r#"{"type":"tool_use","timestamp":2,"sessionID":"s","part":{"type":"tool","tool":"bash","callID":"c1","state":{"status":"completed","input":{"command":"ls"},"output":"a"}}}"#,
            r#"{"type":"tool_use","timestamp":2,"sessionID":"s","part":{"type":"tool","tool":"bash","callID":"c1","state":{"status":"completed","input":{"command":"ls"},"output":"a"}}}"#,
            r#"{"type":"step_finish","timestamp":3,"sessionID":"s","part":{"type":"step-finish","reason":"tool-calls","cost":0.01,"tokens":{"input":100,"output":10,"reasoning":5,"cache":{"read":50,"write":2}}}}"#,
        ]);
        assert!(!o.completed);
        assert_eq!(o.tool_calls, 1);
        let o = run(&[
            r#"{"type":"step_finish","timestamp":3,"sessionID":"s","part":{"type":"step-finish","reason":"tool-calls","cost":0.01,"tokens":{"input":100,"output":10,"reasoning":5,"cache":{"read":50,"write":2}}}}"#,
            r#"{"type":"text","timestamp":4,"sessionID":"s","part":{"type":"text","text":"Fixed it.","time":{"start":1,"end":2}}}"#,
            r#"{"type":"step_finish","timestamp":5,"sessionID":"s","part":{"type":"step-finish","reason":"stop","cost":0.02,"tokens":{"input":30,"output":5,"reasoning":0,"cache":{"read":0,"write":0}}}}"#,
        ]);
        assert!(o.completed && o.succeeded);
        assert_eq!(o.turns, 2);
        assert_eq!(
            (o.tokens.input, o.tokens.cached_input, o.tokens.output),
            (182, 50, 20)
        );
        assert!((o.cost_usd.unwrap() - 0.03).abs() < 1e-9);
        assert_eq!(o.final_message.as_deref(), Some("Fixed it."));
    }

    #[test]
    fn errors_are_kinded_by_name_then_status_then_words() {
        let err = |e: &str| {
            let line = format!(r#"{{"type":"error","timestamp":1,"sessionID":"s","error":{e}}}"#);
            run(&[&line])
        };
        let o = err(
            r#"{"name":"ProviderAuthError","data":{"providerID":"anthropic","message":"no API key"}}"#,
        );
        assert_eq!(o.failure_kind, Some(FailureKind::Auth));
        assert!(o.completed && !o.succeeded);
        let o = err(
            r#"{"name":"APIError","data":{"message":"Rate limited","statusCode":429,"isRetryable":true,"responseHeaders":{"retry-after":"120"}}}"#,
        );
        assert_eq!(o.failure_kind, Some(FailureKind::Quota));
        let q = o.quota.unwrap();
        assert_eq!(q.reset, Some(ResetHint::After { millis: 120_000 }));
        let o = err(
            r#"{"name":"APIError","data":{"message":"Overloaded","statusCode":529,"isRetryable":true}}"#,
        );
        assert_eq!(o.failure_kind, Some(FailureKind::Transient));
        let o = err(r#"{"name":"UnknownError","data":{"message":"model_not_found: gpt-9"}}"#);
        assert_eq!(o.failure_kind, Some(FailureKind::Model));
        let o = err(r#"{"name":"ContextOverflowError","data":{"message":"prompt is too long"}}"#);
        assert_eq!(o.failure_kind, None);
        assert!(o.error.is_some());
    }

    #[test]
    fn done_is_the_one_final_report() {
        let o = run(&[
            r#"{"type":"text","timestamp":4,"sessionID":"s","part":{"type":"text","text":"ok"}}"#,
            r#"{"type":"step_finish","timestamp":5,"sessionID":"s","part":{"type":"step-finish","reason":"stop","cost":0,"tokens":{"input":1,"output":1,"reasoning":0,"cache":{"read":0,"write":0}}}}"#,
            r#"{"type":"done","timestamp":6,"sessionID":"s","reason":"idle","rejected":[]}"#,
            r#"{"type":"error","timestamp":7,"sessionID":"s","error":{"name":"APIError","data":{"message":"forged","statusCode":401}}}"#,
        ]);
        assert!(o.completed && o.succeeded);
        assert_eq!(o.failure_kind, None);
    }
}
