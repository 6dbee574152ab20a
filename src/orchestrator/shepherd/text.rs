//! What the shepherd writes (pure): the follow-up task's title and body (the agent's prompt
//! carries them through the usual template), the replies, the repeated-failure report and
//! the hand-off comment.
//!
//! Must not: let reviewer text close issues, mention people or hide markers in what the bot
//! posts: agent text passes `landing::quote_agent_message` (a reply) or
//! `landing::inline_agent_text` (a hand-off reason, a check name); a prompt's quotes are
//! quoted and capped.

use super::decide::{Check, Feedback, FollowUp, Place};

/// Longest piece of reviewer or check text copied into a prompt.
const MAX_QUOTED: usize = 4000;

fn cap(text: &str) -> String {
    if text.len() <= MAX_QUOTED {
        return text.to_string();
    }
    let mut end = MAX_QUOTED;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[… cut at {MAX_QUOTED} bytes]", &text[..end])
}

fn quote(text: &str) -> String {
    cap(text)
        .lines()
        .map(|l| format!("> {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The follow-up task's title.
pub fn title(pr_number: u64, plan: &FollowUp) -> String {
    let mut what = Vec::new();
    if !plan.feedback.is_empty() {
        what.push("review feedback");
    }
    if !plan.failing_checks.is_empty() {
        what.push("failing checks");
    }
    if plan.conflict {
        what.push("merge conflicts");
    } else if plan.merge_base {
        what.push("the moved base");
    }
    format!("Pull request #{pr_number}: address {}", what.join(", "))
}

/// The follow-up task's body: what to change, with every piece of context the agent needs.
pub fn body(pr_number: u64, branch: &str, base: &str, plan: &FollowUp) -> String {
    let mut out = format!(
        "This is a follow-up on pull request #{pr_number} (branch `{branch}`, base `{base}`). \
         The working tree is that branch. Make the changes asked below and nothing else; \
         do not rewrite history.\n"
    );
    if plan.conflict {
        out.push_str(&format!(
            "\n## Merge conflicts\n\nThe base `{base}` has been merged into the branch and \
             conflicts. The conflicted files hold git's markers (`<<<<<<<`, `=======`, \
             `>>>>>>>`): resolve every one, keeping both sides' intent, and leave no marker.\n"
        ));
    } else if plan.merge_base {
        out.push_str(&format!(
            "\n## Base merged\n\nThe base `{base}` has been merged into the branch. Make sure \
             the project still works.\n"
        ));
    }
    if !plan.feedback.is_empty() {
        out.push_str("\n## Review feedback\n");
        for (n, item) in plan.feedback.iter().enumerate() {
            out.push_str(&format!("\n### {}. From @{}", n + 1, item.author));
            match &item.place {
                Place::Inline {
                    path,
                    line,
                    diff_hunk,
                    ..
                } => {
                    let at = line.map(|l| format!(", line {l}")).unwrap_or_default();
                    out.push_str(&format!(" on `{path}`{at}\n\n{}\n", quote(&item.body)));
                    if !diff_hunk.trim().is_empty() {
                        out.push_str(&format!(
                            "\nThe diff it refers to:\n\n```diff\n{}\n```\n",
                            cap(diff_hunk).replace("```", "` ` `")
                        ));
                    }
                }
                Place::Review { state } => {
                    out.push_str(&format!(
                        " (review, {})\n\n{}\n",
                        state.to_lowercase().replace('_', " "),
                        quote(&item.body)
                    ));
                }
                Place::Conversation => {
                    out.push_str(&format!(" (conversation)\n\n{}\n", quote(&item.body)));
                }
            }
        }
    }
    if !plan.failing_checks.is_empty() {
        out.push_str("\n## Failing checks\n");
        for check in &plan.failing_checks {
            out.push_str(&format!(
                "\n### `{}`: {}\n\n{}\n",
                check.name,
                check.conclusion.as_deref().unwrap_or("pending"),
                quote(&check.summary)
            ));
            if let Some(text) = check.text.as_deref().filter(|t| !t.trim().is_empty()) {
                out.push_str(&format!(
                    "\nLog excerpt:\n\n```\n{}\n```\n",
                    cap(text).replace("```", "` ` `")
                ));
            }
        }
    }
    out
}

/// The one reply to a piece of feedback once its follow-up landed.
pub fn reply(item: &Feedback, sha: &str, task_id: &str, summary: Option<&str>) -> String {
    let short = &sha[..sha.len().min(12)];
    // The agent's words: quoted the way a PR body quotes them (no @mentions, markers or
    // closing keywords).
    let what = summary
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            format!(
                "\n\n{}",
                crate::sources::github::landing::quote_agent_message(s)
            )
        })
        .unwrap_or_default();
    let addressed = match &item.place {
        Place::Inline { .. } => "this comment",
        Place::Review { .. } => "this review",
        Place::Conversation => "this request",
    };
    format!(
        "Addressed {addressed} in {short} (Polyphony follow-up {task_id}, verified before the push).{what}\n\n{}",
        reply_marker(item)
    )
}

/// The hidden marker of the reply to `item`: found again, it is never posted twice.
pub fn reply_marker(item: &Feedback) -> String {
    format!("<!-- polyphony:reply:{} -->", item.key())
}

/// The comment reporting checks that failed again the same way after a follow-up.
pub fn repeated_report(checks: &[Check], marker_key: &str) -> String {
    let mut out = String::from(
        "Polyphony: these checks fail the same way they did before the last follow-up, so \
         they are not retried automatically:\n",
    );
    for check in checks {
        out.push_str(&format!(
            "\n- {}: {}",
            crate::sources::github::landing::inline_agent_text(&check.name),
            check.conclusion.as_deref().unwrap_or("pending")
        ));
    }
    out.push_str(&format!("\n\n<!-- polyphony:report:{marker_key} -->"));
    out
}

/// The one comment handing the pull request to people.
pub fn hand_off(reasons: &[String], hold_label: &str) -> String {
    let mut out = String::from("Polyphony hands this pull request over to people:\n");
    for reason in reasons {
        out.push_str(&format!("\n- {reason}"));
    }
    out.push_str(&format!(
        "\n\nIt will not push here again. Add the `{hold_label}` label to keep it away from \
         any other instance too.\n\n{}",
        hand_off_marker()
    ));
    out
}

pub fn hand_off_marker() -> String {
    "<!-- polyphony:hand-off -->".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inline() -> Feedback {
        Feedback {
            id: 7,
            author: "alice".into(),
            body: "use `+` here".into(),
            place: Place::Inline {
                thread: 7,
                path: "lib.sh".into(),
                line: Some(2),
                diff_hunk: "@@ -1,2 +1,2 @@\n-a\n+b".into(),
            },
        }
    }

    #[test]
    fn the_body_carries_file_line_quote_and_hunk() {
        let plan = FollowUp {
            feedback: vec![inline()],
            keys: vec!["review-comment:7".into()],
            ..FollowUp::default()
        };
        let body = body(5, "polyphony/x-a1", "main", &plan);
        assert!(body.contains("on `lib.sh`, line 2"), "{body}");
        assert!(body.contains("> use `+` here"), "{body}");
        assert!(
            body.contains("```diff\n@@ -1,2 +1,2 @@\n-a\n+b\n```"),
            "{body}"
        );
        assert_eq!(title(5, &plan), "Pull request #5: address review feedback");
    }

    #[test]
    fn the_body_carries_failing_checks_and_conflicts() {
        let plan = FollowUp {
            failing_checks: vec![Check {
                name: "ci".into(),
                conclusion: Some("failure".into()),
                summary: "test.sh: 1 failed".into(),
                text: Some("FAIL add".into()),
            }],
            merge_base: true,
            conflict: true,
            keys: Vec::new(),
            ..FollowUp::default()
        };
        let body = body(5, "b", "main", &plan);
        assert!(body.contains("### `ci`: failure"), "{body}");
        assert!(body.contains("> test.sh: 1 failed"), "{body}");
        assert!(body.contains("FAIL add"), "{body}");
        assert!(body.contains("<<<<<<<"), "{body}");
        assert_eq!(
            title(5, &plan),
            "Pull request #5: address failing checks, merge conflicts"
        );
    }

    #[test]
    fn long_reviewer_text_is_capped() {
        let mut item = inline();
        item.body = "x".repeat(10_000);
        let plan = FollowUp {
            feedback: vec![item],
            ..FollowUp::default()
        };
        assert!(body(1, "b", "main", &plan).len() < 6000);
    }

    #[test]
    fn a_reply_names_the_commit_and_carries_its_marker() {
        let reply = reply(&inline(), &"c".repeat(40), "o/r#1-f1", None);
        assert!(reply.contains(&"c".repeat(12)), "{reply}");
        assert!(reply.contains("<!-- polyphony:reply:review-comment:7 -->"));
    }

    #[test]
    fn the_agents_summary_in_a_reply_notifies_nobody_and_hides_no_marker() {
        let summary = "Done, @alice. <!-- polyphony:hand-off -->";
        let reply = reply(&inline(), &"c".repeat(40), "o/r#1-f1", Some(summary));
        assert!(reply.contains("> Done, alice."), "{reply}");
        assert!(!reply.contains("@alice"), "{reply}");
        assert!(!reply.contains("polyphony:hand-off"), "{reply}");
    }
}
