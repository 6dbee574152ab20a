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

use serde_json::{Map, Value};

use super::claude::use_stdin;
use super::common::{
    content_text, event, one_line, parse_object, str_of, tool_summary, u64_of, unknown,
    unknown_object, value_text,
};
use super::{quota, AgentAdapter, AgentOutcome, Classified, Invocation};
use crate::domain::{AgentType, EventKind, RunSpec, TokenUsage};

pub struct CodexAdapter;

impl AgentAdapter for CodexAdapter {
    fn agent_type(&self) -> AgentType {
        AgentType::Codex
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
        // `codex exec` has no turn limit flag; the deadline bounds the run instead.
        if use_stdin(prompt) {
            argv.push("-".into());
            Invocation {
                argv,
                stdin: Some(prompt.to_string()),
            }
        } else {
            argv.push(prompt.to_string());
            Invocation { argv, stdin: None }
        }
    }

    fn classify(&self, line: &str) -> Classified {
        match parse_object(line) {
            Ok(map) => classify_object(map),
            Err(note) => unknown(line, note),
        }
    }

    fn is_final(&self, event: &Classified) -> bool {
        matches!(
            str_of(&event.data, "type"),
            Some("turn.completed" | "turn.failed")
        )
    }

    fn observe(&self, outcome: &mut AgentOutcome, event: &Classified) {
        let data = &event.data;
        match str_of(data, "type") {
            Some("turn.completed") => {
                outcome.completed = true;
                outcome.succeeded = true;
                outcome.turns += 1;
                outcome.quota = None;
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
                if let Some(q) = quota::in_error(&msg) {
                    outcome.quota = Some(q);
                }
                // A bare turn.failed after a limit `error` keeps that limit.
                outcome.error = Some(one_line(&msg, 500));
            }
            Some("error") => {
                let msg = str_of(data, "message").unwrap_or("").to_string();
                if let Some(q) = quota::in_error(&msg) {
                    outcome.quota = Some(q);
                }
                outcome.error = Some(one_line(&msg, 500));
            }
            Some("item.completed") => {
                let item = data.get("item").unwrap_or(&Value::Null);
                if item_type(item) == Some("agent_message") {
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
