//! Operations on a home, beside the attempt pipeline: what `cleanup`, `doctor` and `logs`
//! do once the verb has parsed its arguments.
//!
//! - `actions`: run now, hold, release a task, and the log of who did what (issue 29)
//! - `cleanup`: which leftover containers, workspaces and locks of a home to remove
//! - `doctor`: environment checks (engine, images, git, config, credentials, token)
//! - `report`: readable renderings of stored events (`logs`) and byte counts
//! - `retention`: what the daemon removes of finished tasks, and the disk a home uses

pub mod actions;
pub mod cleanup;
pub mod doctor;
pub mod report;
pub mod retention;
