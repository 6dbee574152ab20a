//! The `polyphony route --explain` rendering: score with evidence per dimension, the
//! matched rule and why each earlier rule did not match. Pure; `--json` is an API
//! Boundary (field names are stable).

use serde_json::json;

use super::rules::RouteDecision;
use super::scoring::{ComplexityScore, TaskFacts};
use crate::domain::Task;

/// Renders an explanation as text, or as pretty JSON when `json` is set.
pub fn render_explanation(
    task: &Task,
    facts: &TaskFacts,
    score: &ComplexityScore,
    decision: &RouteDecision,
    json: bool,
) -> String {
    if json {
        return render_json(task, facts, score, decision);
    }
    let mut out = String::new();
    // Every line is clipped: a 10 MB body made lines hundreds of KB long (issue 12).
    let mut line = |s: String| {
        out.push_str(&clip(&s, MAX_LINE_CHARS));
        out.push('\n');
    };
    line(format!("Task {}: {}", task.id, task.title));
    line(format!(
        "  source {} · repo {} · type {} · risk {} · scope {} · web {} · ~{} context tokens",
        task.source,
        task.repo,
        facts.task_type,
        facts.risk,
        facts.scope(),
        if facts.requires_web { "yes" } else { "no" },
        facts.context_tokens
    ));
    if !facts.labels.is_empty() {
        line(format!("  labels: {}", facts.labels.join(", ")));
    }
    if !facts.repo_checked {
        line("  repository: not read (scored from the task text)".to_string());
    }
    for w in &facts.warnings {
        line(format!("  warning: {w}"));
    }
    line(String::new());
    line(format!("Complexity {}/10", score.total));
    for (name, d) in score.dimensions() {
        line(format!("  {name:<18} {}  {}", d.score, d.reason));
        for e in d.evidence.iter().take(MAX_LIST_ITEMS) {
            line(format!("  {:<18}    - {e}", ""));
        }
        if d.evidence.len() > MAX_LIST_ITEMS {
            line(format!(
                "  {:<18}    … and {} more (--json lists all)",
                "",
                d.evidence.len() - MAX_LIST_ITEMS
            ));
        }
    }
    if !facts.missing_paths.is_empty() {
        let shown: Vec<&str> = facts
            .missing_paths
            .iter()
            .take(MAX_LIST_ITEMS)
            .map(String::as_str)
            .collect();
        let more = facts.missing_paths.len().saturating_sub(MAX_LIST_ITEMS);
        line(format!(
            "  mentioned but not in the repository: {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" … and {more} more")
            } else {
                String::new()
            }
        ));
    }
    line(String::new());
    let rule = if decision.rule == super::rules::DEFAULT_RULE {
        "the default rule (no rule matched)".to_string()
    } else {
        format!("rule `{}`", decision.rule)
    };
    let fallback = if decision.fallback.is_empty() {
        "none".to_string()
    } else {
        decision.fallback.join(" -> ")
    };
    line(format!(
        "Routed by {rule} to agent `{}` (fallback: {fallback}{})",
        decision.agent,
        decision
            .identity
            .as_deref()
            .map(|i| format!("; identity `{i}`"))
            .unwrap_or_default()
    ));
    if let Some(note) = &decision.context {
        line(format!("  context: {note}"));
    }
    for miss in &decision.skipped {
        line(format!(
            "  skipped rule `{}`: {} expected {}, got {}",
            miss.rule, miss.predicate, miss.expected, miss.actual
        ));
    }
    out
}

/// Evidence items and missing paths shown per list in the text rendering.
const MAX_LIST_ITEMS: usize = 20;
/// Longest line of the text rendering, in characters.
const MAX_LINE_CHARS: usize = 400;

/// `s` cut to `max` characters, with `…` when cut.
fn clip(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(max) {
        None => std::borrow::Cow::Borrowed(s),
        Some((end, _)) => std::borrow::Cow::Owned(format!("{}…", &s[..end])),
    }
}

fn render_json(
    task: &Task,
    facts: &TaskFacts,
    score: &ComplexityScore,
    decision: &RouteDecision,
) -> String {
    let v = json!({
        "task": {
            "id": task.id,
            "title": task.title,
            "source": task.source,
            "repo": task.repo,
            "task_type": facts.task_type,
            "risk": facts.risk,
            "scope": facts.scope(),
            "requires_web": facts.requires_web,
            "labels": facts.labels,
            "context_tokens": facts.context_tokens,
        },
        "facts": facts,
        "score": score,
        "decision": decision,
    });
    // Serialising plain data into a Value cannot fail.
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Risk, SourceKind, TaskType};
    use crate::routing::rules::RuleMiss;
    use crate::routing::scoring::{score, FileFact, IdentifierFact};
    use chrono::TimeZone;

    fn sample() -> (Task, TaskFacts, ComplexityScore, RouteDecision) {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let mut task = Task::new(
            "local-3",
            SourceKind::Local,
            "local:3",
            "/srv/app",
            "Fix the session lock",
            now,
        );
        task.labels = vec!["bug".into()];
        let facts = TaskFacts {
            text: "Fix the session lock".into(),
            task_type: TaskType::Bugfix,
            risk: Risk::Low,
            labels: vec!["bug".into()],
            repo_checked: true,
            files: vec![FileFact {
                path: "src/session.rs".into(),
                loc: 64,
                bytes: 1800,
                verified: true,
            }],
            missing_paths: vec!["src/gone.rs".into()],
            identifiers: vec![IdentifierFact {
                name: "refresh_token".into(),
                files: vec![
                    "src/a.rs".into(),
                    "src/b.rs".into(),
                    "src/session.rs".into(),
                ],
            }],
            context_tokens: 455,
            ..TaskFacts::default()
        };
        let s = score(&facts);
        let decision = RouteDecision {
            rule: "bugfix-small".into(),
            agent: "codex".into(),
            fallback: vec!["claude".into()],
            identity: None,
            skipped: vec![RuleMiss {
                rule: "docs".into(),
                predicate: "task_type".into(),
                expected: "docs".into(),
                actual: "bugfix".into(),
            }],
            context: None,
        };
        (task, facts, s, decision)
    }

    #[test]
    fn text_shows_evidence_rule_and_misses() {
        let (t, f, s, d) = sample();
        let out = render_explanation(&t, &f, &s, &d, false);
        let expect = "\
Task local-3: Fix the session lock
  source local · repo /srv/app · type bugfix · risk low · scope small · web no · ~455 context tokens
  labels: bug

Complexity 5/10
  cyclomatic depth   2  1 file and 64 LOC mentioned (0: <10 LOC and 0-1 files; 1: 10+ LOC or 2+ files; 2: 50+ LOC or 5+ files)
                        - src/session.rs (64 LOC)
  fan-out            1  3 files reference the 1 mentioned identifier (0: 0-2 callers; 1: 3-10; 2: 11+)
                        - refresh_token: 3 caller files (src/a.rs, src/b.rs, src/session.rs)
  security           1  1 distinct security keyword (0: none; 1: one; 2: two or more)
                        - session (task text)
  concurrency        1  1 distinct concurrency keyword (0: none; 1: one; 2: two or more)
                        - lock (task text)
  domain invariants  0  risk low, not a refactor (0: low risk; 1: medium risk or refactor; 2: high risk)
                        - risk: low
  mentioned but not in the repository: src/gone.rs

Routed by rule `bugfix-small` to agent `codex` (fallback: claude)
  skipped rule `docs`: task_type expected docs, got bugfix
";
        assert_eq!(out, expect);
    }

    #[test]
    fn default_rule_and_text_only_scoring_are_said() {
        let (t, mut f, s, mut d) = sample();
        f.repo_checked = false;
        d.rule = "default".into();
        d.fallback.clear();
        d.identity = Some("work".into());
        let out = render_explanation(&t, &f, &s, &d, false);
        assert!(
            out.contains("  repository: not read (scored from the task text)\n"),
            "{out}"
        );
        assert!(out.contains("Routed by the default rule (no rule matched) to agent `codex` (fallback: none; identity `work`)"), "{out}");
    }

    #[test]
    fn json_is_structured() {
        let (t, f, s, d) = sample();
        let v: serde_json::Value =
            serde_json::from_str(&render_explanation(&t, &f, &s, &d, true)).unwrap();
        assert_eq!(v["task"]["id"], "local-3");
        assert_eq!(v["task"]["scope"], "small");
        assert_eq!(v["score"]["total"], 5);
        assert_eq!(v["score"]["fan_out"]["score"], 1);
        assert_eq!(v["facts"]["files"][0]["loc"], 64);
        assert_eq!(v["decision"]["rule"], "bugfix-small");
        assert_eq!(v["decision"]["skipped"][0]["predicate"], "task_type");
    }
}
