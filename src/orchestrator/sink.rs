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
        let last = events
            .iter()
            .rfind(|e| e.stream == EventStream::Stdout && !e.summary.is_empty())
            .map_or("", |e| e.summary.as_str());
        self.progress
            .activity(&self.task_id, &self.agent, live.turns, live.cost_usd, last);
        Ok(())
    }
}

pub(crate) fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}
