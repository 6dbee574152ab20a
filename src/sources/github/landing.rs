//! Landing on GitHub: one pull request, one issue comment, the label swap; or the blocked
//! report. Plus the pure renderers (evidence table, PR body, blocked comment) the local
//! queue reuses.
//!
//! Owns: idempotency of every write. Before creating a pull request it looks for one from
//! the same head branch (any state); before commenting it looks for the hidden marker.
//! Must not: push (the workspace pushed the branch already), or retry a create whose outcome
//! it has not checked.

use super::model::PullRequest;
use serde_json::json;

use super::claim::{add_labels, ensure_comment, remove_label};
use super::client::{encode_component, GithubClient, GithubError, Repeat};
use super::intake::repo_facts;
use super::{GithubSettings, IssueRef, Labels};
use crate::domain::{CheckEvidence, Task};
use crate::sources::{Blocked, Landed, Reported};

/// Hidden marker of the landed comment.
pub fn landed_marker(task_id: &str) -> String {
    format!("<!-- polyphony:landed task={task_id} -->")
}

/// Hidden marker of the blocked comment.
pub fn blocked_marker(task_id: &str) -> String {
    format!("<!-- polyphony:blocked task={task_id} -->")
}

/// Hidden marker of the cancelled comment.
pub fn cancelled_marker(task_id: &str) -> String {
    format!("<!-- polyphony:cancelled task={task_id} -->")
}

/// Hidden marker in the pull request body.
pub fn pr_marker(task_id: &str) -> String {
    format!("<!-- polyphony:pr task={task_id} -->")
}

/// Open (or find) the pull request for `landed.branch`, comment on the issue once with its
/// link, and swap the labels to landed. Safe to call again after a crash at any point.
pub async fn land(
    client: &GithubClient,
    settings: &GithubSettings,
    issue: &IssueRef,
    task: &Task,
    landed: &Landed,
) -> Result<Reported, GithubError> {
    let base = match landed.base_ref.clone().or_else(|| task.base_ref.clone()) {
        Some(base) => base,
        None => repo_facts(client, &issue.repo).await?.default_branch,
    };
    let title = if landed.title.trim().is_empty() {
        task.title.clone()
    } else {
        landed.title.clone()
    };
    let body = format!(
        "{}\n{}\n",
        render_pr_body(landed, Some(issue.number)),
        pr_marker(&task.id)
    );
    let request = json!({
        "title": title,
        "head": landed.branch,
        "base": base,
        "body": body,
        "draft": settings.draft_prs,
    });
    let (pr, pr_created) = ensure_pull_request(client, issue, &landed.branch, &request).await?;
    crate::failpoint::hit("land-pr");
    let pr_url = pr
        .html_url
        .as_ref()
        .map(|u| u.to_string())
        .unwrap_or_else(|| pr.url.clone());

    let marker = landed_marker(&task.id);
    let comment = format!(
        "Polyphony opened {pr_url} from `{}` for this issue: all {} verification checks passed.\n\n{marker}",
        landed.branch,
        landed.evidence.len()
    );
    let (comment_id, comment_created) =
        ensure_comment(client, issue, &marker, &comment, None).await?;
    crate::failpoint::hit("land-comment");

    let labels = &settings.labels;
    // The new label first, then the old ones go: no instant without a label (issue 19).
    add_labels(client, issue, &[labels.landed.as_str()]).await?;
    crate::failpoint::hit("land-labels");
    remove_label(client, issue, &labels.ready).await?;
    remove_label(client, issue, &labels.claimed).await?;
    Ok(Reported {
        pr_url: Some(pr_url),
        pr_number: Some(pr.number),
        comment_ids: vec![comment_id],
        created: pr_created || comment_created,
    })
}

/// The pull request from `branch` of this repository: found (any state), else created. A
/// create whose answer was lost, or refused because one exists (422), is followed by a
/// second look; only a lost create that left nothing behind is tried once more.
async fn ensure_pull_request(
    client: &GithubClient,
    issue: &IssueRef,
    branch: &str,
    request: &serde_json::Value,
) -> Result<(PullRequest, bool), GithubError> {
    let repo = &issue.repo;
    let mut retried = false;
    loop {
        if let Some(existing) = find_pull_request(client, issue, branch).await? {
            return Ok((existing, false));
        }
        let created = client
            .post_json::<PullRequest>(
                &format!("opening a pull request from `{branch}` on {repo}"),
                &format!("{}/pulls", repo.api_path()),
                request,
                Repeat::Never,
            )
            .await;
        match created {
            Ok(pr) => return Ok((pr, true)),
            Err(e) if !retried && (e.outcome_unknown() || is_already_exists(&e)) => {
                tracing::warn!(%repo, branch, error = %e, "pull request outcome unclear: looking again");
                retried = true;
            }
            Err(e) => return Err(e),
        }
    }
}

fn is_already_exists(e: &GithubError) -> bool {
    matches!(e, GithubError::Api { status: 422, message, .. } if message.contains("already exists"))
}

/// `GET /repos/{o}/{r}/pulls?head=owner:branch&state=all`
pub async fn find_pull_request(
    client: &GithubClient,
    issue: &IssueRef,
    branch: &str,
) -> Result<Option<PullRequest>, GithubError> {
    let repo = &issue.repo;
    let head = format!("{}:{branch}", repo.owner);
    let path = format!(
        "{}/pulls?head={}&state=all&per_page=100",
        repo.api_path(),
        encode_component(&head)
    );
    let pulls: Vec<PullRequest> = client
        .get_all_pages(
            &format!("looking for a pull request from `{branch}` on {repo}"),
            &path,
        )
        .await?;
    // The filter is the server's; check the head ref ourselves as well.
    Ok(pulls.into_iter().find(|p| p.head.ref_field == branch))
}

/// Comment the reasons of the last attempts once and label the issue blocked.
pub async fn block(
    client: &GithubClient,
    labels: &Labels,
    issue: &IssueRef,
    task_id: &str,
    blocked: &Blocked,
) -> Result<Reported, GithubError> {
    let marker = blocked_marker(task_id);
    let body = format!(
        "{}\nOnce the cause is fixed, label this issue `{}` again (or run `polyphony retry {task_id}`): a new attempt starts.\n{marker}\n",
        render_blocked_comment(task_id, blocked, &labels.blocked),
        labels.ready
    );
    let (comment_id, created) = ensure_comment(client, issue, &marker, &body, None).await?;
    add_labels(client, issue, &[labels.blocked.as_str()]).await?;
    crate::failpoint::hit("block-labels");
    remove_label(client, issue, &labels.ready).await?;
    remove_label(client, issue, &labels.claimed).await?;
    Ok(Reported {
        pr_url: None,
        pr_number: None,
        comment_ids: vec![comment_id],
        created,
    })
}

/// Tell the issue a person cancelled its task (`polyphony cancel`) and release the claim:
/// one comment saying who, the claimed and ready labels off (the issue is no longer
/// offered; labelling it ready again starts a new generation). Safe to repeat.
pub async fn cancelled(
    client: &GithubClient,
    labels: &Labels,
    issue: &IssueRef,
    task_id: &str,
    reason: &str,
) -> Result<Reported, GithubError> {
    let marker = cancelled_marker(task_id);
    let body = format!(
        "Polyphony stopped work on this issue: {}.\n\nNo attempt runs any more. Label it `{}` again (or run `polyphony retry {task_id}`) to start anew.\n{marker}\n",
        inline_agent_text(reason),
        labels.ready
    );
    let (comment_id, created) = ensure_comment(client, issue, &marker, &body, None).await?;
    remove_label(client, issue, &labels.claimed).await?;
    remove_label(client, issue, &labels.ready).await?;
    Ok(Reported {
        pr_url: None,
        pr_number: None,
        comment_ids: vec![comment_id],
        created,
    })
}

/// Markdown table of verification evidence (spec §10): check, command, exit, duration,
/// result. Pure; the local queue shows the same table.
pub fn render_evidence_table(evidence: &[CheckEvidence]) -> String {
    if evidence.is_empty() {
        return "_No verification checks are configured for this repository._\n".to_string();
    }
    let mut out =
        String::from("| Check | Command | Exit | Duration | Result |\n|---|---|---|---|---|\n");
    for check in evidence {
        let exit = check
            .exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "—".into());
        let result = if check.passed {
            "✅ passed"
        } else {
            "❌ failed"
        };
        out.push_str(&format!(
            "| {} | {} | {exit} | {} | {result} |\n",
            table_cell(&check.name),
            code_cell(&check.command),
            format_duration_ms(check.duration_ms),
        ));
    }
    out
}

/// Longest agent message quoted in a pull request body, in characters.
pub const MAX_AGENT_MESSAGE_CHARS: usize = 2000;

static HTML_COMMENT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?s)<!--.*?(-->|\z)").unwrap_or_else(|e| unreachable!("{e}"))
});
// GitHub's closing keywords followed by an issue reference (#N, owner/repo#N or an issue
// URL): https://docs.github.com/en/issues/tracking-your-work-with-issues/linking-a-pull-request-to-an-issue
static CLOSING: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r"(?i)\b(?:close|closes|closed|fix|fixes|fixed|resolve|resolves|resolved)\b(\s*:?\s*)((?:[\w.-]+/[\w.-]+)?#\d+|https?://\S+/(?:issues|pull)/\d+)",
    )
    .unwrap_or_else(|e| unreachable!("{e}"))
});
static MENTION: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(^|[^\w`@])@([A-Za-z0-9][A-Za-z0-9-]*(?:/[\w.-]+)?)")
        .unwrap_or_else(|e| unreachable!("{e}"))
});

/// Agent text with what GitHub would act on defused: terminal controls and HTML comments
/// (they could carry our hidden markers) go, closing keywords lose their keyword and
/// their `#` (only our own `Closes #N` may close an issue), @mentions lose their `@`
/// (nobody is notified). Pure.
fn defuse(text: &str) -> String {
    let text = crate::domain::terminal::printable(text);
    let text = HTML_COMMENT.replace_all(&text, "");
    // What is left of a comment (`<!-`, a lone `-->`) cannot open or close one either.
    let text = text
        .replace("<!", "<\u{200b}!")
        .replace("-->", "--\u{200b}>");
    let text = CLOSING.replace_all(&text, |c: &regex::Captures<'_>| {
        let reference = match c[2].strip_prefix('#') {
            Some(n) => format!("issue {n}"),
            None => c[2].replacen('#', " issue ", 1),
        };
        format!("[closing keyword removed]{}{reference}", &c[1])
    });
    MENTION.replace_all(&text, "$1$2").into_owned()
}

/// A fence of backticks longer than any run of backticks in `text` (at least `min`).
fn fence_for(text: &str, min: usize) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(min))
}

/// The agent's final message as it may appear in a pull request body or a reply (issues
/// 11, 24): written by the agent, so untrusted. [`defuse`]d, capped at
/// [`MAX_AGENT_MESSAGE_CHARS`], and shown as a code block inside a quote, so no markdown,
/// link, image, HTML or mention of it renders; every line is quoted. Pure.
pub fn quote_agent_message(message: &str) -> String {
    let text = defuse(message);
    let text = text.trim();
    let mut capped: String = text.chars().take(MAX_AGENT_MESSAGE_CHARS).collect();
    if capped.len() < text.len() {
        capped.push_str("\n\n… (cut; `polyphony logs` has the whole message)");
    }
    let fence = fence_for(&capped, 3);
    std::iter::once(format!("> {fence}text"))
        .chain(capped.lines().map(|l| {
            if l.trim().is_empty() {
                ">".to_string()
            } else {
                format!("> {l}")
            }
        }))
        .chain(std::iter::once(format!("> {fence}")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Longest piece of agent text in one table cell or list item, in characters.
pub const MAX_AGENT_INLINE_CHARS: usize = 500;

/// Agent text inside one line the bot writes (a table cell, a list item; issue 24: the
/// blocked comment's reasons carried an agent's @mention, link and a planted claim
/// marker): [`defuse`]d, on one line, capped at [`MAX_AGENT_INLINE_CHARS`], pipes escaped,
/// as inline code so no markdown, link or mention of it renders. Pure.
pub fn inline_agent_text(text: &str) -> String {
    let one_line = defuse(text)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut capped: String = one_line.chars().take(MAX_AGENT_INLINE_CHARS).collect();
    if capped.len() < one_line.len() {
        capped.push('…');
    }
    if capped.is_empty() {
        return "—".into();
    }
    let capped = capped.replace('|', "\\|");
    let fence = fence_for(&capped, 1);
    // A space inside the fence keeps a leading or trailing backtick apart from it.
    if capped.starts_with('`') || capped.ends_with('`') {
        format!("{fence} {capped} {fence}")
    } else {
        format!("{fence}{capped}{fence}")
    }
}

/// The pull request body: summary, evidence table, run figures, `Closes #N`. Pure.
pub fn render_pr_body(landed: &Landed, closes: Option<u64>) -> String {
    let mut out = String::new();
    let summary = landed.summary.trim();
    if summary.is_empty() {
        out.push_str("Changes made by a Polyphony agent.\n");
    } else {
        out.push_str("The agent's final message (its own words, not verified):\n\n");
        out.push_str(&quote_agent_message(summary));
        out.push('\n');
    }
    out.push_str("\n### Verification\n\n");
    out.push_str(&render_evidence_table(&landed.evidence));
    out.push_str("\n### Run\n\n");
    let cost = landed
        .cost_usd
        .map(|c| format!("${c:.2}"))
        .unwrap_or_else(|| "not reported".into());
    out.push_str(&format!(
        "| Agent | Attempt | Turns | Tokens (in / out) | Cost |\n|---|---|---|---|---|\n| {} | {} | {} | {} ({} / {}) | {cost} |\n",
        table_cell(&landed.agent),
        landed.attempt,
        landed.turns,
        landed.tokens.total(),
        landed.tokens.input,
        landed.tokens.output,
    ));
    out.push_str(&format!("\nBranch: `{}`\n", landed.branch));
    if let Some(number) = closes {
        out.push_str(&format!("\nCloses #{number}\n"));
    }
    out
}

/// The blocked comment (without its marker). Pure.
pub fn render_blocked_comment(task_id: &str, blocked: &Blocked, blocked_label: &str) -> String {
    let mut out = format!(
        "Polyphony stopped working on task `{task_id}` after {} attempt{} and labelled it `{blocked_label}`; a person needs to look.\n\n",
        blocked.attempts.len(),
        if blocked.attempts.len() == 1 { "" } else { "s" }
    );
    if blocked.attempts.is_empty() {
        out.push_str("No attempt recorded a reason.\n");
        return out;
    }
    out.push_str("| Attempt | Agent | Reason |\n|---|---|---|\n");
    for a in &blocked.attempts {
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            a.attempt,
            table_cell(&a.agent),
            inline_agent_text(&a.reason)
        ));
    }
    out
}

/// One line, pipes escaped, so the cell cannot break the table.
fn table_cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// Inline code that survives backticks in the command.
fn code_cell(s: &str) -> String {
    let s = table_cell(s);
    if s.is_empty() {
        "—".into()
    } else if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

fn format_duration_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{}m {:02}s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::TokenUsage;
    use crate::sources::BlockedAttempt;

    fn ev(name: &str, command: &str, exit: Option<i64>, ms: u64, passed: bool) -> CheckEvidence {
        CheckEvidence {
            name: name.into(),
            command: command.into(),
            exit_code: exit,
            duration_ms: ms,
            passed,
            output_tail: "ignored".into(),
        }
    }

    fn check_table(evidence: &[CheckEvidence], expect: &str) {
        assert_eq!(render_evidence_table(evidence), expect);
    }

    #[test]
    fn evidence_tables() {
        check_table(
            &[],
            "_No verification checks are configured for this repository._\n",
        );
        check_table(
            &[
                ev("test", "cargo test", Some(0), 12_345, true),
                ev("lint", "cargo clippy -- -D warnings", Some(0), 800, true),
                ev("typecheck", "npx tsc | tee x", Some(2), 61_000, false),
                ev("diff", "", None, 0, false),
                ev("weird", "echo `date`\nsecond line", Some(-1), 1_000, false),
            ],
            "| Check | Command | Exit | Duration | Result |\n\
             |---|---|---|---|---|\n\
             | test | `cargo test` | 0 | 12.3 s | ✅ passed |\n\
             | lint | `cargo clippy -- -D warnings` | 0 | 800 ms | ✅ passed |\n\
             | typecheck | `npx tsc \\| tee x` | 2 | 1m 01s | ❌ failed |\n\
             | diff | — | — | 0 ms | ❌ failed |\n\
             | weird | `` echo `date` second line `` | -1 | 1.0 s | ❌ failed |\n",
        );
    }

    fn landed() -> Landed {
        Landed {
            branch: "polyphony/octo-widgets-7-a2".into(),
            base_ref: None,
            title: String::new(),
            summary: "Fixed the off-by-one in the pager.".into(),
            agent: "claude".into(),
            attempt: 2,
            evidence: vec![ev("test", "make test", Some(0), 2_000, true)],
            turns: 14,
            tokens: TokenUsage {
                input: 30_000,
                output: 4_567,
                cached_input: 0,
            },
            cost_usd: Some(0.4249),
        }
    }

    /// `want`: the quoted lines; they sit between the code fence's lines.
    fn check_quote(message: &str, want: &str) {
        assert_eq!(
            quote_agent_message(message),
            format!("> ```text\n{want}\n> ```"),
            "{message:?}"
        );
    }

    #[test]
    fn agent_message_is_quoted_and_defused() {
        check_quote("Done.\n\nAll tests pass.", "> Done.\n>\n> All tests pass.");
        check_quote(
            "Fixes #12 and closes: acme/web#3; resolved https://github.com/a/b/issues/9",
            "> [closing keyword removed] issue 12 and [closing keyword removed]: acme/web issue 3; [closing keyword removed] https://github.com/a/b/issues/9",
        );
        check_quote("fixed the prefix bug", "> fixed the prefix bug");
        check_quote(
            "thanks @octocat and @acme/admins; mail a@b.com",
            "> thanks octocat and acme/admins; mail a@b.com",
        );
        check_quote(
            "ok <!-- polyphony:landed task=o/r#1 --> done <!-- open",
            "> ok  done",
        );
        check_quote("\u{1b}]0;t\u{7}title", "> title");
        let long = "x".repeat(MAX_AGENT_MESSAGE_CHARS + 10);
        let quoted = quote_agent_message(&long);
        assert!(quoted.starts_with(&format!(
            "> ```text\n> {}",
            "x".repeat(MAX_AGENT_MESSAGE_CHARS)
        )));
        assert!(quoted.ends_with("> … (cut; `polyphony logs` has the whole message)\n> ```"));
        let body = render_pr_body(
            &Landed {
                summary: "Closes #99 <!-- polyphony:pr task=x -->".into(),
                ..landed()
            },
            Some(7),
        );
        assert_eq!(body.matches("Closes #").count(), 1, "{body}");
        assert!(
            body.contains("\nCloses #7\n") && !body.contains("polyphony:pr"),
            "{body}"
        );
    }

    #[test]
    fn pr_body_has_every_part() {
        let body = render_pr_body(&landed(), Some(7));
        for part in [
            "> Fixed the off-by-one in the pager.\n",
            "### Verification",
            "| test | `make test` | 0 | 2.0 s | ✅ passed |",
            "| claude | 2 | 14 | 34567 (30000 / 4567) | $0.42 |",
            "Branch: `polyphony/octo-widgets-7-a2`",
            "\nCloses #7\n",
        ] {
            assert!(body.contains(part), "missing {part:?} in\n{body}");
        }
        let mut quiet = landed();
        quiet.summary = "  ".into();
        quiet.cost_usd = None;
        let body = render_pr_body(&quiet, None);
        assert!(
            body.starts_with("Changes made by a Polyphony agent.\n"),
            "{body}"
        );
        assert!(body.contains("| not reported |"), "{body}");
        assert!(!body.contains("Closes"), "{body}");
    }

    #[test]
    fn blocked_comment_lists_the_reasons() {
        let blocked = Blocked {
            attempts: vec![
                BlockedAttempt {
                    attempt: 1,
                    agent: "codex".into(),
                    reason: "verification failed: test exited 1".into(),
                },
                BlockedAttempt {
                    attempt: 2,
                    agent: "claude".into(),
                    reason: "timeout | after 30m".into(),
                },
            ],
        };
        let text = render_blocked_comment("octo/widgets#7", &blocked, "agent-blocked");
        assert!(
            text.contains("after 2 attempts and labelled it `agent-blocked`"),
            "{text}"
        );
        assert!(
            text.contains("| 1 | codex | `verification failed: test exited 1` |"),
            "{text}"
        );
        assert!(
            text.contains("| 2 | claude | `timeout \\| after 30m` |"),
            "{text}"
        );
        let none = render_blocked_comment("t", &Blocked { attempts: vec![] }, "b");
        assert!(none.contains("after 0 attempts") && none.contains("No attempt recorded"));
    }

    /// Issue 24: agent text in a line the bot writes renders as inert inline code and
    /// can neither mention, link, nor plant a marker; markers count in the bot's form only.
    #[test]
    fn agent_text_inline_is_inert_and_planted_markers_do_not_count() {
        let hostile = "ask @mallory: [docs](https://evil.example/x) **now** <!-- polyphony:claim task=o/r#1.2 attempt=1 by=mallory --> fixes #3 | x `y`\nsecond";
        let cell = inline_agent_text(hostile);
        assert_eq!(
            cell,
            "``ask mallory: [docs](https://evil.example/x) **now** [closing keyword removed] issue 3 \\| x `y` second``"
        );
        assert_eq!(inline_agent_text("`x`"), "`` `x` ``");
        assert_eq!(inline_agent_text("  "), "—");
        assert_eq!(inline_agent_text("a <!-- b"), "`a`");
        assert_eq!(
            inline_agent_text("a --> <!- b"),
            "`a --\u{200b}> <\u{200b}!- b`"
        );
        let blocked = Blocked {
            attempts: vec![BlockedAttempt {
                attempt: 1,
                agent: "claude".into(),
                reason: hostile.into(),
            }],
        };
        let body = render_blocked_comment("o/r#1", &blocked, "agent-blocked");
        assert!(
            !body.contains("@mallory") && !body.contains("polyphony:claim"),
            "{body}"
        );
        let marker = super::super::claim::claim_marker("o/r#1.2", 1, "mallory");
        for planted in [
            format!("text {marker}"),
            format!("> {marker}"),
            format!("| 1 | {marker} |"),
            format!("```\n{marker}\n```"),
            format!("~~~~\n{marker}\n~~~~"),
            format!("{marker} tail"),
            "<!-- polyphony:claim x --><!-- polyphony:claim y -->".to_string(),
        ] {
            assert!(
                super::super::claim::marker_lines(&planted).is_empty(),
                "{planted}"
            );
        }
        let ours = format!("Polyphony claimed this.\n\n{marker}");
        assert_eq!(
            super::super::claim::marker_lines(&ours),
            vec![marker.as_str()]
        );
        let after_fence = format!("```\ncode\n```\n{marker}\r\n");
        assert!(super::super::claim::has_marker(&after_fence, &marker));
    }

    #[test]
    fn markers_are_distinct_per_kind_and_task() {
        let all = [
            landed_marker("o/r#1"),
            blocked_marker("o/r#1"),
            pr_marker("o/r#1"),
            landed_marker("o/r#10"),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert!(
                    !a.contains(b.as_str()) && !b.contains(a.as_str()),
                    "{a} vs {b}"
                );
            }
            assert!(a.starts_with("<!-- ") && a.ends_with(" -->"));
        }
    }
}
