//! The container watchdog: kills and removes this home's containers whose deadline label
//! has passed, whatever happened to the code that was following them (a broken log
//! stream, an engine error, a follower task that died).
//!
//! Every container Polyphony starts carries [`LABEL_DEADLINE`] (Unix seconds: its own
//! deadline plus [`GRACE`]), set by `orchestrator::execute` when it creates
//! the container. The daemon
//! sweeps every [`SWEEP_EVERY`], and also removes this home's staging directories (the
//! per-container credential copies) that a killed daemon left behind.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{ContainerSummary, RuntimeError, WorkerRuntime, LABEL_HOME};

/// Label key: Unix time (seconds) after which the container may be killed and removed.
pub const LABEL_DEADLINE: &str = "polyphony.deadline";
/// Added to a container's own deadline before the watchdog acts: the follower kills on
/// time and needs a moment to collect the exit code and the last lines.
pub const GRACE: Duration = Duration::from_secs(60);
/// Staging directories (credential copies) older than this with no process owning them
/// are removed by the sweep.
pub const STALE_STAGING: Duration = Duration::from_secs(10 * 60);
/// How often the daemon sweeps.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// The label value for a container whose own deadline is `deadline` from `now`.
pub fn deadline_label(now: DateTime<Utc>, deadline: Duration) -> String {
    let secs = (deadline + GRACE).as_secs().min(i64::MAX as u64 / 2) as i64;
    (now.timestamp().saturating_add(secs)).to_string()
}

/// Whether a container is past its labelled deadline. Pure. A container without the
/// label (or with a label that does not parse) is never overdue.
pub fn overdue(c: &ContainerSummary, now: DateTime<Utc>) -> bool {
    c.labels
        .get(LABEL_DEADLINE)
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|at| now.timestamp() > at)
}

/// Kills and removes every overdue container of `home_label`; returns their names.
pub async fn sweep(
    rt: &dyn WorkerRuntime,
    home_label: &str,
    now: DateTime<Utc>,
) -> Result<Vec<String>, RuntimeError> {
    let stale = super::staging::sweep_stale(home_label, STALE_STAGING);
    if stale > 0 {
        tracing::info!(
            removed = stale,
            "removed staging directories left by an earlier run"
        );
    }
    let found = rt
        .list_by_labels(&[(LABEL_HOME.to_string(), home_label.to_string())])
        .await?;
    let mut swept = Vec::new();
    for c in found.iter().filter(|c| overdue(c, now)) {
        tracing::warn!(container = %c.name, "past its deadline: killing and removing it");
        rt.kill(&c.id).await.ok();
        match rt.remove(&c.id).await {
            Ok(()) => swept.push(c.name.clone()),
            Err(e) => tracing::warn!(container = %c.name, error = %e, "cannot remove"),
        }
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RunState;

    fn summary(label: Option<&str>) -> ContainerSummary {
        ContainerSummary {
            id: "x".into(),
            name: "n".into(),
            state: RunState::Running,
            labels: label
                .map(|v| [(LABEL_DEADLINE.to_string(), v.to_string())].into())
                .unwrap_or_default(),
        }
    }

    #[test]
    fn overdue_only_past_a_parsable_label() {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        assert!(overdue(&summary(Some("999999")), now));
        assert!(!overdue(&summary(Some("1000000")), now));
        assert!(!overdue(&summary(Some("soon")), now));
        assert!(!overdue(&summary(None), now));
        assert_eq!(
            deadline_label(now, Duration::from_secs(40)),
            (1_000_000 + 40 + GRACE.as_secs()).to_string()
        );
    }
}
