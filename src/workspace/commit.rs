//! The default change limit of a landing commit and the checks every landing commit's author
//! and message pass (the commit itself is `snapshot::commit_once`).
//!
//! Issue 23 removed `harden`, the list of things deleted from or rewritten in the agent's
//! `.git` before host-side git ran there: nothing runs there any more. The agent's `.git`
//! is its own business inside its container; after it exits, the orchestrator reads only
//! the working tree's files (`worktree.rs`) into its own repository (`own.rs`).

use super::{Author, WorkspaceError};

/// The default change limit of `commit_once`: `verify.max_changed_files`'s default.
pub const DEFAULT_MAX_CHANGED_FILES: usize = 50_000;

pub(super) fn check_message(message: &str) -> Result<(), WorkspaceError> {
    if message.trim().is_empty() || message.contains('\0') {
        return Err(WorkspaceError::InvalidInput {
            what: "commit message",
            value: message.to_string(),
            reason: "it must be non-empty text without NUL".into(),
        });
    }
    Ok(())
}

pub(super) fn check_author(author: &Author) -> Result<(), WorkspaceError> {
    for (what, v) in [
        ("author name", &author.name),
        ("author email", &author.email),
    ] {
        if v.trim().is_empty() || v.contains(['<', '>', '\n', '\r', '\0']) {
            return Err(WorkspaceError::InvalidInput {
                what,
                value: v.to_string(),
                reason: "set git.author_name / git.author_email in config.yaml to plain text without <, > or newlines".into(),
            });
        }
    }
    Ok(())
}
