//! The prompt an agent receives (spec §8, DESIGN "a retry prompt carries the previous
//! attempt's verification failures").
//!
//! Syntax: `{name}` is a placeholder; `{{` and `}}` are literal braces. Placeholders:
//! `{title} {body} {source_ref} {repo} {branch} {attempt} {previous_failures}
//! {verify_commands}`. A template is parsed (and so validated) once, when config loads; an
//! unknown placeholder is an error naming it and the file. Rendering is pure and total.
//!
//! Architecture Invariant: `parse` and `render` are pure. `PromptTemplate::load` is the one
//! thin file read, called from the config edge.

use std::fmt;
use std::path::Path;

use crate::domain::{CheckEvidence, VerifyCommand};

/// Longest output tail of one failed check carried into a retry prompt, in bytes.
pub const FAILURE_TAIL_BYTES: usize = 4000;

/// At most this many failed checks are listed (bounded repair loop).
pub const MAX_FAILURES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    Title,
    Body,
    SourceRef,
    Repo,
    Branch,
    Attempt,
    PreviousFailures,
    VerifyCommands,
}

impl Placeholder {
    pub const ALL: [Placeholder; 8] = [
        Placeholder::Title,
        Placeholder::Body,
        Placeholder::SourceRef,
        Placeholder::Repo,
        Placeholder::Branch,
        Placeholder::Attempt,
        Placeholder::PreviousFailures,
        Placeholder::VerifyCommands,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Placeholder::Title => "title",
            Placeholder::Body => "body",
            Placeholder::SourceRef => "source_ref",
            Placeholder::Repo => "repo",
            Placeholder::Branch => "branch",
            Placeholder::Attempt => "attempt",
            Placeholder::PreviousFailures => "previous_failures",
            Placeholder::VerifyCommands => "verify_commands",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    #[error("{origin}:{line}: unknown placeholder `{{{name}}}`{hint}; known: {known} (write `{{{{` for a literal brace)")]
    UnknownPlaceholder {
        origin: String,
        line: usize,
        name: String,
        hint: String,
        known: String,
    },
    #[error("{origin}:{line}: `{{` is never closed; write `{{{{` for a literal brace")]
    Unclosed { origin: String, line: usize },
    #[error("{origin}:{line}: stray `}}`; write `}}}}` for a literal brace")]
    StrayClose { origin: String, line: usize },
    #[error("cannot read prompt template {path}: {reason}")]
    Read { path: String, reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Text(String),
    Var(Placeholder),
}

/// A parsed, validated template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptTemplate {
    segments: Vec<Segment>,
}

/// Everything a prompt can mention.
#[derive(Debug, Clone, Default)]
pub struct PromptContext<'a> {
    pub title: &'a str,
    pub body: &'a str,
    /// Where the task came from: `owner/repo#42` or `queue:17`.
    pub source_ref: &'a str,
    pub repo: &'a str,
    pub branch: &'a str,
    pub attempt: u32,
    /// The previous attempt's checks; only the failed ones are shown.
    pub previous_failures: &'a [CheckEvidence],
    pub verify_commands: &'a [VerifyCommand],
    /// Set when this attempt continues the work of one stopped by a usage limit
    /// (`quota_handoff: continue`, issue 14): said in place of `{previous_failures}`.
    pub handoff: Option<&'a str>,
}

/// The built-in template.
pub const DEFAULT_TEMPLATE: &str = "\
You are working on the repository {repo}, checked out in /workspace on branch {branch}.
Task ({source_ref}, attempt {attempt}): {title}

{body}

How to work:
- Work only inside /workspace. Make the smallest complete change that solves the task.
- Run the project's checks yourself before you finish:
{verify_commands}
- You do not need to commit or push; the orchestrator commits, re-runs the checks in a clean
  container and opens the pull request.
- Do not edit CI configuration or the verification configuration.
- Finish with a short summary of what you changed and why.

Previous attempt:
{previous_failures}
";

impl PromptTemplate {
    pub fn builtin() -> PromptTemplate {
        match PromptTemplate::parse(DEFAULT_TEMPLATE, "<built-in>") {
            Ok(t) => t,
            Err(e) => unreachable!("built-in template is valid: {e}"),
        }
    }

    /// Parses `text`; `origin` (the file) names errors.
    pub fn parse(text: &str, origin: &str) -> Result<PromptTemplate, PromptError> {
        let mut segments = Vec::new();
        let mut lit = String::new();
        let mut line = 1;
        let mut chars = text.char_indices().peekable();
        while let Some((_, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|p| p.1) == Some('{') => {
                    chars.next();
                    lit.push('{');
                }
                '}' if chars.peek().map(|p| p.1) == Some('}') => {
                    chars.next();
                    lit.push('}');
                }
                '}' => {
                    return Err(PromptError::StrayClose {
                        origin: origin.to_string(),
                        line,
                    })
                }
                '{' => {
                    let mut name = String::new();
                    let mut closed = false;
                    for (_, n) in chars.by_ref() {
                        if n == '}' {
                            closed = true;
                            break;
                        }
                        if n == '\n' || name.len() > 64 {
                            break;
                        }
                        name.push(n);
                    }
                    if !closed {
                        return Err(PromptError::Unclosed {
                            origin: origin.to_string(),
                            line,
                        });
                    }
                    let key = name.trim();
                    let Some(p) = Placeholder::ALL.into_iter().find(|p| p.name() == key) else {
                        let best = Placeholder::ALL
                            .into_iter()
                            .map(|p| (strsim::jaro_winkler(p.name(), key), p.name()))
                            .max_by(|a, b| a.0.total_cmp(&b.0));
                        let hint = match best {
                            Some((score, n)) if score > 0.8 => {
                                format!(" (did you mean `{{{n}}}`?)")
                            }
                            _ => String::new(),
                        };
                        return Err(PromptError::UnknownPlaceholder {
                            origin: origin.to_string(),
                            line,
                            name: key.to_string(),
                            hint,
                            known: Placeholder::ALL
                                .iter()
                                .map(|p| format!("{{{}}}", p.name()))
                                .collect::<Vec<_>>()
                                .join(" "),
                        });
                    };
                    if !lit.is_empty() {
                        segments.push(Segment::Text(std::mem::take(&mut lit)));
                    }
                    segments.push(Segment::Var(p));
                }
                '\n' => {
                    line += 1;
                    lit.push(c);
                }
                _ => lit.push(c),
            }
        }
        if !lit.is_empty() {
            segments.push(Segment::Text(lit));
        }
        Ok(PromptTemplate { segments })
    }

    /// Reads and parses a template file (the config's `prompt_template`).
    pub fn load(path: &Path) -> Result<PromptTemplate, PromptError> {
        let text = std::fs::read_to_string(path).map_err(|e| PromptError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        PromptTemplate::parse(&text, &path.display().to_string())
    }

    /// The placeholders the template uses, in order.
    pub fn placeholders(&self) -> Vec<Placeholder> {
        self.segments
            .iter()
            .filter_map(|s| match s {
                Segment::Var(p) => Some(*p),
                Segment::Text(_) => None,
            })
            .collect()
    }

    pub fn render(&self, ctx: &PromptContext<'_>) -> String {
        let mut out = String::new();
        for seg in &self.segments {
            match seg {
                Segment::Text(t) => out.push_str(t),
                Segment::Var(p) => out.push_str(&value(*p, ctx)),
            }
        }
        out
    }
}

fn value(p: Placeholder, ctx: &PromptContext<'_>) -> String {
    match p {
        Placeholder::Title => ctx.title.to_string(),
        Placeholder::Body => {
            if ctx.body.trim().is_empty() {
                "(no description)".to_string()
            } else {
                ctx.body.to_string()
            }
        }
        Placeholder::SourceRef => ctx.source_ref.to_string(),
        Placeholder::Repo => ctx.repo.to_string(),
        Placeholder::Branch => ctx.branch.to_string(),
        Placeholder::Attempt => ctx.attempt.to_string(),
        Placeholder::VerifyCommands => render_verify(ctx.verify_commands),
        Placeholder::PreviousFailures => match ctx.handoff {
            Some(note) => note.to_string(),
            None => render_failures(ctx.previous_failures),
        },
    }
}

fn render_verify(cmds: &[VerifyCommand]) -> String {
    if cmds.is_empty() {
        return "  (no checks are configured; run the project's usual tests)".to_string();
    }
    cmds.iter()
        .map(|c| format!("  - {}: `{}`", c.name, c.command))
        .collect::<Vec<_>>()
        .join("\n")
}

fn render_failures(checks: &[CheckEvidence]) -> String {
    let failed: Vec<&CheckEvidence> = checks.iter().filter(|c| !c.passed).collect();
    if failed.is_empty() {
        return "None: this is the first attempt.".to_string();
    }
    let mut out =
        String::from("The previous attempt's changes failed verification. Fix these failures:\n");
    for c in failed.iter().take(MAX_FAILURES) {
        let code = c
            .exit_code
            .map_or_else(|| "no exit code".to_string(), |e| format!("exit code {e}"));
        out.push_str(&format!(
            "\n### {}: `{}` ({code})\n```\n{}\n```\n",
            c.name,
            c.command,
            tail(&c.output_tail, FAILURE_TAIL_BYTES).trim_end()
        ));
    }
    if failed.len() > MAX_FAILURES {
        out.push_str(&format!(
            "\n({} more failed checks not shown)\n",
            failed.len() - MAX_FAILURES
        ));
    }
    out
}

/// The last `max` bytes of `s`, starting on a char boundary.
fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

impl fmt::Display for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{{}}}", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> PromptContext<'static> {
        PromptContext {
            title: "Fix the parser",
            body: "It panics on `{`.",
            source_ref: "acme/app#42",
            repo: "acme/app",
            branch: "polyphony/acme-app-42-a1",
            attempt: 1,
            previous_failures: &[],
            verify_commands: &[],
            handoff: None,
        }
    }

    #[test]
    fn a_handoff_is_said_in_place_of_the_previous_failures() {
        let note = "The previous attempt (claude) stopped at its usage limit.";
        let c = PromptContext {
            attempt: 2,
            handoff: Some(note),
            ..ctx()
        };
        let out = PromptTemplate::builtin().render(&c);
        assert!(out.contains(&format!("Previous attempt:\n{note}")), "{out}");
        assert!(!out.contains("None: this is the first attempt."));
    }

    fn check(template: &str, want: &str) {
        let t = PromptTemplate::parse(template, "t.txt").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.render(&ctx()), want);
    }

    #[test]
    fn renders_placeholders_and_escapes() {
        check(
            "{title} on {branch}",
            "Fix the parser on polyphony/acme-app-42-a1",
        );
        check("{{title}} {{ }}", "{title} { }");
        check("#{attempt} {source_ref}", "#1 acme/app#42");
        check("body: {body}", "body: It panics on `{`.");
        check("{ title }", "Fix the parser");
        check("", "");
    }

    fn check_err(template: &str, want: &str) {
        let err = PromptTemplate::parse(template, "/home/p/prompt.md")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(want), "{template:?}: {err}");
    }

    #[test]
    fn rejects_bad_templates() {
        check_err(
            "hi {titel}",
            "/home/p/prompt.md:1: unknown placeholder `{titel}` (did you mean `{title}`?)",
        );
        check_err("a\nb {nope}", "prompt.md:2: unknown placeholder `{nope}`");
        check_err("open {title", "never closed");
        check_err("x } y", "stray `}`");
    }

    #[test]
    fn builtin_uses_every_placeholder() {
        let used = PromptTemplate::builtin().placeholders();
        for p in Placeholder::ALL {
            assert!(used.contains(&p), "{p} unused");
        }
    }

    #[test]
    fn retry_lists_failures_bounded() {
        let long = format!("{}END", "x".repeat(10_000));
        let failures = vec![
            CheckEvidence {
                name: "test".into(),
                command: "cargo test".into(),
                exit_code: Some(101),
                duration_ms: 5,
                passed: false,
                output_tail: long,
            },
            CheckEvidence {
                name: "lint".into(),
                command: "cargo clippy".into(),
                exit_code: Some(0),
                duration_ms: 5,
                passed: true,
                output_tail: "ok".into(),
            },
        ];
        let verify = vec![VerifyCommand {
            name: "test".into(),
            command: "cargo test".into(),
            timeout_seconds: 60,
        }];
        let c = PromptContext {
            attempt: 2,
            previous_failures: &failures,
            verify_commands: &verify,
            ..ctx()
        };
        let out = PromptTemplate::builtin().render(&c);
        assert!(
            out.contains("### test: `cargo test` (exit code 101)"),
            "{out}"
        );
        assert!(out.contains("END"));
        assert!(
            !out.contains("cargo clippy"),
            "passed checks are not failures"
        );
        assert!(out.contains("  - test: `cargo test`"));
        assert!(out.contains("attempt 2"));
        assert!(out.len() < 6000, "tail bounded: {}", out.len());
        let first = PromptTemplate::builtin().render(&ctx());
        assert!(first.contains("None: this is the first attempt."));
    }
}
