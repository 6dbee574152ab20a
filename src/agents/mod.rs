//! Agent adapters: one per coding-agent CLI (spec §8.1–8.3, §9).
//!
//! An adapter knows its CLI's real headless invocation and stream format. It builds the
//! argv, classifies each output line into a [`Classified`] event and folds events into an
//! [`AgentOutcome`] (completion, turns, tokens, cost, quota).
//!
//! Architecture Invariant: adapters are pure. They never touch disk, clock, network or
//! Docker, and never panic or error on a malformed line: it becomes `EventKind::Unknown`.
//! API Boundary: the [`AgentAdapter`] trait.

use serde::{Deserialize, Serialize};

use crate::domain::{AgentType, EventKind, RunSpec, TokenUsage};

pub mod claude;
pub mod codex;
mod common;
pub mod gemini;
pub mod kimi;
pub mod opencode;
pub mod prompt;
pub mod quota;
pub mod replay;
pub mod scrub;
pub mod spec;

pub use common::MAX_LINE_BYTES;
pub use spec::{
    AgentSpec, BaseUrl, CredentialKind, FailureText, GatewaySpec, ProfileFlag, WireApi,
};

/// The registry: the adapter for each CLI id, and the one match on [`AgentType`] (ids are
/// declared in `domain::agent`, everything else about a CLI is its adapter's
/// [`AgentSpec`]). A new CLI is its adapter file, one line here, its id, its fake in
/// `images/test/fake/polyphony-fake.sh`, its fixtures and a row in docs/agents.md.
pub fn adapter_for(t: AgentType) -> Box<dyn AgentAdapter> {
    match t {
        AgentType::Claude => Box::new(claude::ClaudeAdapter),
        AgentType::Codex => Box::new(codex::CodexAdapter),
        AgentType::Kimi => Box::new(kimi::KimiAdapter),
        AgentType::Gemini => Box::new(gemini::GeminiAdapter),
        AgentType::OpenCode => Box::new(opencode::OpenCodeAdapter),
    }
}

/// The descriptor of one CLI family (its adapter's [`AgentAdapter::spec`]).
pub fn descriptor(t: AgentType) -> &'static AgentSpec {
    adapter_for(t).spec()
}

/// Built by the adapters, run by `runtime` (a domain value so `runtime` needs no `agents`).
pub use crate::domain::Invocation;

/// One classified output line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classified {
    pub kind: EventKind,
    /// One human line: "assistant: Fixed the parser", "tool Bash: cargo test".
    pub summary: String,
    /// The parsed JSON, or `{"raw": line}` when the line was not JSON.
    pub data: serde_json::Value,
}

/// A usage or rate limit the CLI reported in a structured event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaHit {
    pub message: String,
    /// When the limit resets, as the CLI said it (epoch seconds or text), if it did.
    pub resets_at: Option<String>,
    /// The same, read: an epoch, a delay or a local wall-clock time (issue 14). Placed in
    /// time by [`quota::reset_instant`] once the caller knows when it saw the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset: Option<quota::ResetHint>,
}

impl QuotaHit {
    /// This hit, keeping `earlier`'s reset when it names none itself: Claude reports a
    /// rejected `rate_limit_event` (with `resetsAt`) before the error message (often
    /// without a time).
    pub fn keeping_reset_of(mut self, earlier: Option<&QuotaHit>) -> QuotaHit {
        if self.reset.is_none() {
            if let Some(e) = earlier.filter(|e| e.reset.is_some()) {
                self.reset = e.reset;
                if self.resets_at.is_none() {
                    self.resets_at = e.resets_at.clone();
                }
            }
        }
        self
    }
}

/// What kind of failure the CLI reported, so an authentication failure, a usage limit and a
/// transient API error are labelled distinctly (in the outcome and `replay --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The model API refused the credentials (401/403): no retry can fix it.
    Auth,
    /// A usage or rate limit (429).
    Quota,
    /// The model API failed (5xx, 529 overloaded): may pass later.
    Transient,
    /// The model or the provider configuration can never work (404 model not found, an
    /// unknown model, a wrong endpoint): permanent, not retried; the agent profile's
    /// `model` (or base URL) must be fixed.
    Model,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Auth => "auth",
            FailureKind::Quota => "quota",
            FailureKind::Transient => "transient",
            FailureKind::Model => "model",
        }
    }

    /// The kind an HTTP status from the model API means, when it means one.
    pub fn of_status(status: u64) -> Option<FailureKind> {
        match status {
            401 | 403 => Some(FailureKind::Auth),
            404 => Some(FailureKind::Model),
            429 => Some(FailureKind::Quota),
            408 | 409 | 425 | 500..=599 => Some(FailureKind::Transient),
            _ => None,
        }
    }
}

/// A failed model API call the CLI is retrying (Claude Code's `system`/`api_retry` lines).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiRetry {
    /// The CLI's retry number and its limit (Claude Code: 10).
    pub attempt: u64,
    pub max_retries: u64,
    /// HTTP status of the failed call, when there was one.
    pub status: Option<u64>,
    /// The CLI's error label (`authentication_failed`, `server_error`, ...).
    pub error: String,
}

/// What the stream said about the run, folded line by line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentOutcome {
    /// A completion event (Claude `result`, Codex `turn.completed`/`turn.failed`, …) was seen.
    pub completed: bool,
    /// The completion said success (and `is_error` was not set).
    pub succeeded: bool,
    pub quota: Option<QuotaHit>,
    pub turns: u32,
    /// Absolute totals for the run, never double counted.
    pub tokens: TokenUsage,
    pub cost_usd: Option<f64>,
    pub final_message: Option<String>,
    /// Tool calls the agent made (shell commands, file edits, MCP and web calls), each
    /// counted once however many lines report it.
    #[serde(default)]
    pub tool_calls: u32,
    /// The error the CLI reported, if any.
    pub error: Option<String>,
    /// Auth, quota, transient or model, when the CLI said which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    /// Set while the CLI is retrying a failed model API call; any other line clears it.
    /// Retries are not progress: the idle timer does not restart on them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_retry: Option<ApiRetry>,
    /// The stream says the run cannot succeed however long it goes on (the model API refused
    /// the key): the runtime stops the container at once instead of waiting out the CLI's
    /// retries.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hopeless: bool,
    /// Adapter bookkeeping between lines (Claude: the last assistant message id counted, so a
    /// message split over several lines is counted once). Not part of the outcome.
    #[serde(skip)]
    pub last_message_id: Option<String>,
    /// Adapter bookkeeping (Codex): ids of tool items already counted in `tool_calls`.
    #[serde(skip)]
    pub tool_ids: std::collections::BTreeSet<String>,
}

/// One coding-agent CLI.
pub trait AgentAdapter: Send + Sync {
    fn agent_type(&self) -> AgentType {
        self.spec().agent_type
    }

    /// The CLI's static facts: command, login files, endpoints, failure words.
    fn spec(&self) -> &'static AgentSpec;

    /// The argv (and stdin) that runs the CLI headless on `prompt` for this attempt.
    fn invocation(&self, spec: &RunSpec, prompt: &str) -> Invocation;

    /// Classifies one line of stdout. Never fails.
    fn classify(&self, line: &str) -> Classified;

    /// Folds one classified line into the outcome so far.
    fn observe(&self, outcome: &mut AgentOutcome, event: &Classified);

    /// Whether `event` is the CLI's one final report (Claude `result`, Codex
    /// `turn.completed`/`turn.failed`, Gemini `result`). The runtime folds nothing after
    /// the first one: a process in the container can write forged report lines to the
    /// container's stdout (`/proc/1/fd/1`), and the CLI's own report comes once, at the
    /// end. Kimi has no final report (its completion is provisional): `false`.
    fn is_final(&self, _event: &Classified) -> bool {
        false
    }
}

/// Folds one stdout line into the outcome: classifies it and, unless the CLI's final report
/// was already seen, observes it (see [`AgentAdapter::is_final`]). The live runtime and
/// `polyphony replay` both go through exactly this, so what `replay FILE --json` concludes
/// from a recording is what the daemon concludes from the same lines. Returns the event and
/// whether it was folded.
pub fn fold(
    adapter: &dyn AgentAdapter,
    outcome: &mut AgentOutcome,
    final_seen: &mut bool,
    line: &str,
) -> (Classified, bool) {
    let event = adapter.classify(line);
    if *final_seen {
        return (event, false);
    }
    adapter.observe(outcome, &event);
    *final_seen = adapter.is_final(&event);
    (event, true)
}

/// The default per-attempt cost maximum in dollars (`container.max_cost_usd_per_attempt`).
pub const DEFAULT_MAX_COST_USD: f64 = 100.0;

/// What one attempt's reported cost may count for: `cap`, and no more than what is left
/// of the identity's daily `ceiling` after `spent` (never below 0). Pure.
pub fn cost_room(cap: f64, ceiling: f64, spent: f64) -> f64 {
    let left = if ceiling.is_finite() && spent.is_finite() {
        (ceiling - spent).max(0.0)
    } else {
        cap
    };
    cap.min(left)
}

impl AgentOutcome {
    /// Clamps the reported cost to `[0, max]` (a NaN, infinite or negative figure counts
    /// as 0, so it can neither disable nor trip a cost ceiling on its own). Returns a
    /// warning when the reported figure was changed. Pure.
    pub fn clamp_cost(&mut self, max: f64) -> Option<String> {
        let reported = self.cost_usd?;
        let max = if max.is_finite() && max >= 0.0 {
            max
        } else {
            DEFAULT_MAX_COST_USD
        };
        let clamped = if !reported.is_finite() || reported < 0.0 {
            0.0
        } else {
            reported.min(max)
        };
        if clamped == reported {
            return None;
        }
        self.cost_usd = Some(clamped);
        Some(format!(
            "the reported cost {reported} is outside 0..={max:.2} dollars (the attempt's `container.max_cost_usd_per_attempt`, or what is left of the identity's daily ceiling); counted as ${clamped:.2}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clamp(reported: Option<f64>, max: f64) -> (Option<f64>, bool) {
        let mut o = AgentOutcome {
            cost_usd: reported,
            ..Default::default()
        };
        let warned = o.clamp_cost(max).is_some();
        (o.cost_usd, warned)
    }

    #[test]
    fn cost_room_is_the_cap_or_what_is_left_of_the_ceiling() {
        assert_eq!(cost_room(100.0, 50.0, 0.0), 50.0);
        assert_eq!(cost_room(100.0, 50.0, 49.5), 0.5);
        assert_eq!(cost_room(100.0, 50.0, 80.0), 0.0);
        assert_eq!(cost_room(10.0, 50.0, 0.0), 10.0);
        assert_eq!(cost_room(10.0, f64::NAN, 0.0), 10.0);
    }

    #[test]
    fn cost_is_clamped_to_zero_and_the_maximum() {
        assert_eq!(clamp(None, 10.0), (None, false));
        assert_eq!(clamp(Some(0.04), 10.0), (Some(0.04), false));
        assert_eq!(clamp(Some(10.0), 10.0), (Some(10.0), false));
        assert_eq!(clamp(Some(1e6), 10.0), (Some(10.0), true));
        assert_eq!(clamp(Some(-5.0), 10.0), (Some(0.0), true));
        assert_eq!(clamp(Some(f64::NAN), 10.0), (Some(0.0), true));
        assert_eq!(clamp(Some(f64::INFINITY), 10.0), (Some(0.0), true));
        // A broken maximum falls back to the default, never to "no maximum".
        assert_eq!(
            clamp(Some(1e6), f64::NAN),
            (Some(DEFAULT_MAX_COST_USD), true)
        );
    }

    #[test]
    fn every_cli_has_one_descriptor() {
        for t in AgentType::ALL {
            let d = descriptor(t);
            assert_eq!(d.agent_type, t);
            assert_eq!(adapter_for(t).agent_type(), t);
            assert!(!d.command.is_empty() && !d.auth_dir.is_empty(), "{t}");
            assert!(!d.credential_files.is_empty(), "{t}");
            assert!(
                !d.api_hosts.is_empty(),
                "{t}: the egress allowlist needs its hosts"
            );
            assert!(!d.api_key_env.is_empty(), "{t}");
            assert!(d.login_hint.contains(d.command), "{t}");
            assert!(
                d.api_hosts.iter().all(|h| h.rsplit_once(':').is_some()),
                "{t}: api_hosts are host:port"
            );
            if let Some(g) = d.gateway {
                assert!(!g.credential_vars.is_empty(), "{t}");
                assert!(!g.base_url_var.is_empty(), "{t}");
            }
            assert_eq!(t.as_str().parse::<AgentType>(), Ok(t));
        }
        let codex = descriptor(AgentType::Codex);
        assert_eq!(
            codex.kind_of_text("You've hit your usage limit. Upgrade to Pro"),
            Some(FailureKind::Quota)
        );
        assert_eq!(
            descriptor(AgentType::Claude).kind_of_text("Not logged in · Please run /login"),
            Some(FailureKind::Auth)
        );
        assert_eq!(
            descriptor(AgentType::Claude)
                .kind_of_text("There's an issue with the selected model (x). It may not exist"),
            Some(FailureKind::Model)
        );
        assert_eq!(codex.kind_of_text("fixed the parser"), None);
    }

    #[test]
    fn final_reports_are_known_per_cli() {
        let classify = |t: AgentType, line: &str| {
            let a = adapter_for(t);
            a.is_final(&a.classify(line))
        };
        assert!(classify(
            AgentType::Claude,
            r#"{"type":"result","subtype":"success"}"#
        ));
        assert!(!classify(
            AgentType::Claude,
            r#"{"type":"assistant","message":{}}"#
        ));
        assert!(classify(
            AgentType::Codex,
            r#"{"type":"turn.completed","usage":{}}"#
        ));
        assert!(classify(
            AgentType::Codex,
            r#"{"type":"turn.failed","error":{}}"#
        ));
        assert!(classify(
            AgentType::Gemini,
            r#"{"type":"result","status":"success"}"#
        ));
        assert!(!classify(
            AgentType::Kimi,
            r#"{"role":"assistant","content":"done"}"#
        ));
        assert!(classify(
            AgentType::OpenCode,
            r#"{"type":"done","timestamp":1,"sessionID":"s","reason":"idle"}"#
        ));
        assert!(!classify(
            AgentType::OpenCode,
            r#"{"type":"step_finish","part":{"reason":"stop"}}"#
        ));
    }
}
