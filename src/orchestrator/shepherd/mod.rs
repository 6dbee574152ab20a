//! The PR shepherd (issue 15): keeps each pull request this home opened moving until it is
//! merged or closed — review feedback from trusted people, failing checks and a base that
//! conflicts become follow-up tasks (each a task of its own, run by the usual pipeline on a
//! fresh clone of the PR branch, verified, pushed on top without force (or, opted in, rebased and pushed with a lease), answered with one
//! reply per comment), bounded by `max_followups` and a hand-off comment, and stopped by the
//! hold label.
//!
//! `decide` is the pure decision, `text` what is written; the IO shell (watching with
//! conditional requests, the follow-up's workspace and landing) lives beside them.

pub mod decide;
pub mod followup;
pub mod github;
pub mod text;
pub mod watch;
