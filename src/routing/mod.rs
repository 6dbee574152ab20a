//! Routing (spec §5): which agent runs a task, and with what.
//!
//! - `facts`: what the task mentions and what that counts for, over the values
//!   `workspace::RepoSnapshot` reads from the repository (pure).
//! - `scoring`: the five complexity dimensions of spec §5.1 (pure).
//! - `rules`: routing.yaml compiled into a [`rules::Router`]; first match wins (pure).
//! - `run_spec`: the immutable RunSpec of one attempt (pure).
//! - `explain`: the `route --explain` rendering (pure).
//!
//! Architecture Invariant: nothing here touches disk, the git CLI, the clock or the network;
//! every function takes values and returns values (the repository is read by
//! `workspace::RepoSnapshot`; `orchestrator::facts` hands `facts` what it read). Routing is
//! total: every task gets a decision.

pub mod context_fit;
pub mod explain;
pub mod facts;
pub mod rules;
pub mod run_spec;
pub mod scoring;

use serde::{Deserialize, Serialize};

pub use context_fit::{fit_context, ContextFit};
pub use explain::render_explanation;
pub use facts::{classify_labels, enrich_task, RepoLookup, RepoRead, TaskText};
pub use rules::{RouteDecision, RouteInput, Router, RoutingError, RuleMiss};
pub use run_spec::{build_run_spec, verification_from_polyphony_yaml, RunSpecInputs};
pub use scoring::{score, ComplexityScore, TaskFacts};

use crate::config::model::RoutingFile;
use crate::domain::Task;

/// What routing sees for a task whose facts are gathered and scored.
pub fn route_input(task: &Task, facts: &TaskFacts, score: &ComplexityScore) -> RouteInput {
    RouteInput {
        task_type: facts.task_type,
        risk: facts.risk,
        scope: facts.scope(),
        requires_web: facts.requires_web,
        labels: task.labels.clone(),
        source: task.source,
        repo: task.repo.clone(),
        complexity: score.total,
    }
}

/// Facts (gathered by `orchestrator::facts::gather_facts`) with their score.
pub fn analyze(facts: TaskFacts) -> (TaskFacts, ComplexityScore) {
    let score = score(&facts);
    (facts, score)
}

/// Everything `route --explain` shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    pub facts: TaskFacts,
    pub score: ComplexityScore,
    pub input: RouteInput,
    pub decision: RouteDecision,
}

impl Explanation {
    /// The human (or `--json`) rendering.
    pub fn render(&self, task: &Task, json: bool) -> String {
        render_explanation(task, &self.facts, &self.score, &self.decision, json)
    }
}

/// Routes `task` with `routing` over its `facts` and says why. Agent names are not checked
/// here (config loading checks them against agents.yaml); the routing file's structure is.
pub fn explain_task(
    task: &Task,
    routing: &RoutingFile,
    facts: TaskFacts,
) -> Result<Explanation, RoutingError> {
    let router = Router::new(routing)?;
    let (facts, score) = analyze(facts);
    let input = route_input(task, &facts, &score);
    let decision = router.route(&input);
    Ok(Explanation {
        facts,
        score,
        input,
        decision,
    })
}
