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

/// The one reply to a piece of feedback once its follow-up landed. `changed`: the paths the
/// pushed commit changed, read from our own repository (None when they could not be read).
/// An inline comment on a file the commit did not touch is not called addressed (issue 29).
pub fn reply(
    item: &Feedback,
    sha: &str,
    task_id: &str,
    summary: Option<&str>,
    changed: Option<&[String]>,
) -> String {
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
    let done = format!("in {short} (Polyphony follow-up {task_id}, verified before the push)");
    let first = match (&item.place, changed) {
        (Place::Inline { path, .. }, Some(paths)) if !paths.iter().any(|p| p == path) => {
            format!(
                "Answered this comment {done}; that commit changed {} but not {}.",
                file_list(paths),
                code_name(path)
            )
        }
        (place, changed) => {
            let addressed = match place {
                Place::Inline { .. } => "this comment",
                Place::Review { .. } => "this review",
                Place::Conversation => "this request",
            };
            let files = changed
                .map(|paths| format!(" It changed {}.", file_list(paths)))
                .unwrap_or_default();
            format!("Addressed {addressed} {done}.{files}")
        }
    };
    format!("{first}{what}\n\n{}", reply_marker(item))
}

/// At most ten of the commit's paths, each as inline code, then how many more.
fn file_list(paths: &[String]) -> String {
    const SHOWN: usize = 10;
    if paths.is_empty() {
        return "no file".into();
    }
    let mut names: Vec<String> = paths.iter().take(SHOWN).map(|p| code_name(p)).collect();
    if paths.len() > SHOWN {
        names.push(format!("{} more", paths.len() - SHOWN));
    }
    match names.len() {
        1 => names.remove(0),
        n => format!("{} and {}", names[..n - 1].join(", "), names[n - 1]),
    }
}

/// A path (the agent chose its name) as inline code that notifies nobody and closes no
/// code span (the same spelling the blocked comment gives agent text).
fn code_name(path: &str) -> String {
    crate::sources::github::landing::inline_agent_text(path)
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
        let reply = reply(&inline(), &"c".repeat(40), "o/r#1-f1", None, None);
        assert!(reply.contains(&"c".repeat(12)), "{reply}");
        assert!(reply.contains("<!-- polyphony:reply:review-comment:7 -->"));
    }

    #[test]
    fn the_agents_summary_in_a_reply_notifies_nobody_and_hides_no_marker() {
        let summary = "Done, @alice. <!-- polyphony:hand-off -->";
        let reply = reply(&inline(), &"c".repeat(40), "o/r#1-f1", Some(summary), None);
        assert!(reply.contains("> Done, alice."), "{reply}");
        assert!(!reply.contains("@alice"), "{reply}");
        assert!(!reply.contains("polyphony:hand-off"), "{reply}");
    }

    #[test]
    fn a_reply_names_what_its_commit_changed() {
        let sha = "c".repeat(40);
        let touched = vec!["lib.sh".to_string(), "README.md".to_string()];
        let reply = reply(&inline(), &sha, "o/r#1-f1", None, Some(&touched));
        assert!(
            reply.starts_with("Addressed this comment in cccccccccccc"),
            "{reply}"
        );
        assert!(
            reply.contains("It changed `lib.sh` and `README.md`."),
            "{reply}"
        );
    }

    #[test]
    fn a_comment_on_a_file_the_commit_did_not_touch_is_not_called_addressed() {
        let sha = "c".repeat(40);
        let other = vec!["calc.sh".to_string()];
        let reply = reply(&inline(), &sha, "o/r#1-f1", None, Some(&other));
        assert!(!reply.contains("Addressed"), "{reply}");
        assert!(
            reply.contains("that commit changed `calc.sh` but not `lib.sh`."),
            "{reply}"
        );
    }

    #[test]
    fn file_names_notify_nobody_and_long_lists_are_cut() {
        let sha = "c".repeat(40);
        let mut paths: Vec<String> = (0..12).map(|i| format!("f{i}.sh")).collect();
        paths[0] = "@mallory `x`.sh".into();
        let reply = reply(&inline(), &sha, "o/r#1-f1", None, Some(&paths));
        assert!(!reply.contains("@mallory"), "{reply}");
        assert!(reply.contains("and 2 more"), "{reply}");
        assert!(!reply.contains("f11.sh"), "{reply}");
    }
}
