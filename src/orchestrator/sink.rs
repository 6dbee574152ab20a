//! Where a running attempt's events go: the store (batched, de-duplicated by seq) and live
//! progress. It moves no task: the pipeline makes the PROVISIONED -> RUNNING transition
//! once the container exists (`pipeline/agent.rs`).

use std::sync::{Arc, Mutex, MutexGuard};

use super::execute::EventSink;
use crate::agents::AgentOutcome;
use crate::domain::{EventStream, TaskEvent};
use crate::store::Store;

use super::Progress;

pub(crate) struct StoreSink<'a> {
    pub store: &'a Mutex<Store>,
    pub task_id: String,
    pub attempt: u32,
    pub agent: String,
    pub progress: Arc<dyn Progress>,
    /// The output breadcrumb is up (issue 24): the next stored batch takes it down.
    pub handling: bool,
    /// The orchestrator's clock (the breadcrumb's time).
    pub clock: super::Clock,
}

impl StoreSink<'_> {
    fn db(&self) -> MutexGuard<'_, Store> {
        self.store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl EventSink for StoreSink<'_> {
    fn record(&mut self, events: &[TaskEvent], live: &AgentOutcome) -> Result<(), String> {
        self.db()
            .append_events(&self.task_id, self.attempt, events)
            .map_err(|e| e.to_string())?;
        if self.handling && !events.is_empty() {
            // Progress: the window is over and the attempt's strikes go.
            if let Err(e) = self.db().clear_handling(&self.task_id, self.attempt) {
                tracing::warn!(task = %self.task_id, error = %e, "cannot clear the output breadcrumb");
            }
            self.handling = false;
        }
        let last = events
            .iter()
            .rfind(|e| e.stream == EventStream::Stdout && !e.summary.is_empty())
            .map_or("", |e| e.summary.as_str());
        self.progress
            .activity(&self.task_id, &self.agent, live.turns, live.cost_usd, last);
        Ok(())
    }

    fn handling(&mut self) {
        let crumb = super::restarts::breadcrumb(super::restarts::WINDOW_OUTPUT);
        let raised = self
            .db()
            .raise_handling(&self.task_id, self.attempt, &crumb, (self.clock)());
        match raised {
            Ok(()) => self.handling = true,
            Err(e) => {
                tracing::warn!(task = %self.task_id, error = %e, "cannot raise the output breadcrumb")
            }
        }
    }
}

pub(crate) fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}
