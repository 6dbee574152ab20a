//! Where an attempt's events go as they arrive, and what scrubs each line before anything
//! stores it.

use crate::agents::scrub::Scrubber;
use crate::agents::AgentOutcome;
use crate::domain::TaskEvent;

/// Where events go as they arrive (the store's batched insert, in production).
pub trait EventSink: Send {
    /// Stores a batch. `live` is the outcome folded so far from every stdout line (the
    /// follower folds once; a sink never folds again). On error the same events are
    /// offered again at the next flush.
    fn record(&mut self, events: &[TaskEvent], live: &AgentOutcome) -> Result<(), String>;

    /// Called once the container exists, before it starts, so the caller can persist the
    /// id for recovery.
    fn container_created(&mut self, _container_id: &str) {}

    /// Called once per follower, when the first line not yet stored arrives and before it
    /// is handled: the daemon is now handling the attempt's own output (issue 24, see
    /// `orchestrator::restarts`). The next successful [`EventSink::record`] is progress.
    fn handling(&mut self) {}
}

/// An [`EventSink`] that keeps everything in memory (tests, `replay`).
#[derive(Debug, Default)]
pub struct VecSink {
    pub events: Vec<TaskEvent>,
    pub batches: usize,
    pub container_id: Option<String>,
}

impl EventSink for VecSink {
    fn record(&mut self, events: &[TaskEvent], _live: &AgentOutcome) -> Result<(), String> {
        self.events.extend_from_slice(events);
        self.batches += 1;
        Ok(())
    }

    fn container_created(&mut self, container_id: &str) {
        self.container_id = Some(container_id.to_string());
    }
}

/// What scrubs output before anything stores it: in production a [`Scrubber`] (every
/// spelling, and a secret split across lines is masked on both sides); any
/// `Fn(&str) -> String` works too and is applied to each line on its own (tests).
pub trait ScrubOutput: Send + Sync {
    /// `text` (one line or several) scrubbed.
    fn scrub_text(&self, text: &str) -> String;
    /// The scrubber, when there is one: lines are then scrubbed as a stream.
    fn scrubber(&self) -> Option<&Scrubber> {
        None
    }
}

impl<F: Fn(&str) -> String + Send + Sync> ScrubOutput for F {
    fn scrub_text(&self, text: &str) -> String {
        self(text)
    }
}

impl ScrubOutput for Scrubber {
    fn scrub_text(&self, text: &str) -> String {
        Scrubber::scrub_text(self, text)
    }

    fn scrubber(&self) -> Option<&Scrubber> {
        Some(self)
    }
}

/// Secret scrubber handed to [`run_attempt`], [`reattach`] and [`run_check`].
pub type Scrub<'a> = &'a dyn ScrubOutput;
