//! Where a running attempt's events go: the store (batched, de-duplicated by seq), the
//! PROVISIONED -> RUNNING transition when the container exists, and live progress.

use std::sync::{Arc, Mutex, MutexGuard};

use chrono::Utc;

use super::execute::EventSink;
use crate::agents::{AgentAdapter, AgentOutcome, Classified};
use crate::domain::{EventStream, TaskEvent, TaskState};
use crate::store::Store;

use super::Progress;

pub(crate) struct StoreSink<'a> {
    pub store: &'a Mutex<Store>,
    pub task_id: String,
    pub attempt: u32,
    pub agent: String,
    pub adapter: &'a dyn AgentAdapter,
    pub progress: Arc<dyn Progress>,
    /// Folded from the stored events for live turns/cost.
    pub live: AgentOutcome,
    /// Move PROVISIONED -> RUNNING when the container is created (fresh attempts only).
    pub mark_running: bool,
    /// Error of the state change or container record, if one failed.
    pub error: Option<String>,
    /// The output breadcrumb is up (issue 24): the next stored batch takes it down.
    pub handling: bool,
}

impl StoreSink<'_> {
    fn db(&self) -> MutexGuard<'_, Store> {
        self.store
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl EventSink for StoreSink<'_> {
    fn record(&mut self, events: &[TaskEvent]) -> Result<(), String> {
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
        let mut last = "";
        for event in events.iter().filter(|e| e.stream == EventStream::Stdout) {
            let classified = Classified {
                kind: event.kind,
                summary: event.summary.clone(),
                data: event.data.clone(),
            };
            self.adapter.observe(&mut self.live, &classified);
            if !event.summary.is_empty() {
                last = &event.summary;
            }
        }
        self.progress.activity(
            &self.task_id,
            &self.agent,
            self.live.turns,
            self.live.cost_usd,
            last,
        );
        Ok(())
    }

    fn handling(&mut self) {
        let crumb = super::restarts::breadcrumb(super::restarts::WINDOW_OUTPUT);
        let raised = self
            .db()
            .raise_handling(&self.task_id, self.attempt, &crumb, Utc::now());
        match raised {
            Ok(()) => self.handling = true,
            Err(e) => {
                tracing::warn!(task = %self.task_id, error = %e, "cannot raise the output breadcrumb")
            }
        }
    }

    fn container_created(&mut self, container_id: &str) {
        crate::failpoint::hit("container-created");
        let recorded = self
            .db()
            .set_container(&self.task_id, self.attempt, container_id);
        if let Err(e) = recorded {
            self.error = Some(format!("cannot record container {container_id}: {e}"));
        }
        if self.mark_running {
            let reason = format!("container {} started", short_id(container_id));
            let moved = self.db().transition(
                &self.task_id,
                TaskState::Provisioned,
                TaskState::Running,
                &reason,
                Utc::now(),
            );
            match moved {
                Ok(_) => self
                    .progress
                    .state(&self.task_id, TaskState::Running, &reason),
                Err(e) => self.error = Some(e.to_string()),
            }
            self.mark_running = false;
        }
    }
}

pub(crate) fn short_id(id: &str) -> &str {
    &id[..id.len().min(12)]
}
