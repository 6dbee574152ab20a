//! A task's routing facts: its repository read by `workspace::RepoSnapshot`, judged by
//! `routing::facts` (pure). The route step of the pipeline and `route --explain` both
//! gather them here and pass them to routing. Never fails: what cannot be read becomes a
//! warning in the facts.

use std::path::Path;

use crate::domain::Task;
use crate::routing::facts::{
    extract_mentions, file_fact, resolve_paths, task_facts, Mentions, RepoLookup, RepoRead,
    TaskText,
};
use crate::routing::TaskFacts;
use crate::workspace::RepoSnapshot;

/// Gathers a task's facts; `repo_dir` is a checkout or a bare mirror (read at the task's
/// `base_ref`, default `HEAD`).
pub fn gather_facts(task: &Task, repo_dir: Option<&Path>) -> TaskFacts {
    let snapshot = repo_dir.map(|p| RepoSnapshot::detect(p, task.base_ref.as_deref()));
    gather_facts_at(task, snapshot.as_ref())
}

/// [`gather_facts`] with an explicit snapshot.
pub fn gather_facts_at(task: &Task, snapshot: Option<&RepoSnapshot>) -> TaskFacts {
    let text = TaskText::of(task);
    let mentions = extract_mentions(&text.scanned);
    let lookup = match snapshot {
        None => RepoLookup::NoRepository,
        Some(snap) => look_up(snap, &mentions),
    };
    task_facts(task, text, &mentions, lookup)
}

/// Reads what the task's `mentions` need: the file list, the mentioned files (one at a
/// time, kept only as their counts) and the files referencing each identifier.
fn look_up(snap: &RepoSnapshot, mentions: &Mentions) -> RepoLookup {
    let all = match snap.list_files() {
        Ok(all) => all,
        Err(error) => {
            return RepoLookup::Unreadable {
                repo: snap.describe(),
                error,
            }
        }
    };
    let (paths, missing_paths) = resolve_paths(mentions, &all);
    let mut read = RepoRead {
        missing_paths,
        files: Vec::new(),
        file_keywords: Vec::new(),
        file_bytes: 0,
        warnings: Vec::new(),
        references: Ok(Vec::new()),
    };
    for path in paths {
        match snap.read(&path) {
            Ok((len, contents)) => {
                read.file_bytes += len;
                let (fact, keywords) = file_fact(path, len, contents.as_deref());
                read.files.push(fact);
                read.file_keywords.extend(keywords);
            }
            Err(e) => read.warnings.push(e),
        }
    }
    read.references = snap.references(&mentions.identifiers, &all);
    RepoLookup::Read(read)
}
