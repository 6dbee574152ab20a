//! Which restarts count against an attempt (issue 24). Pure, except [`boot_id`].
//!
//! A restart of the machine or of the daemon (an upgrade, an OOM elsewhere, a person's
//! `kill -9`, a crash-looping host) is never the attempt's doing and costs it nothing: the
//! attempt is resumed, however often. The one restart an attempt could have caused is the
//! daemon dying *while handling that attempt's own output* (a line the parser chokes on, a
//! working tree the commit cannot survive) with nothing stored since: that restart would
//! repeat forever. So the daemon raises a breadcrumb (`store::Handling`) when it enters
//! such a window and removes it once the window made progress (the first new event stored,
//! the landing commit recorded); a breadcrumb still there at the next start, raised in the
//! same boot, is a *strike*. Strikes reset with progress. After [`MAX_STRIKES`] strikes in
//! a row the attempt is given up, which is not the agent's failure (`failures` is not
//! counted); the task's next attempt runs at once, and after `max_attempts` such give-ups
//! the task is BLOCKED as an orchestrator fault to report. Time is bounded separately: the
//! agent's deadline counts from its container's start, across restarts.
//!
//! Before any give-up the attempt's pending intents are finished (a verified landing is
//! pushed, its pull request found or opened, commented and labelled): see
//! `pipeline::interrupted`.

use crate::store::Handling;

/// Strikes in a row (restarts that the attempt itself could have caused) after which an
/// attempt is given up.
pub const MAX_STRIKES: u32 = 3;

/// The windows in which the daemon handles an attempt's own output.
pub const WINDOW_OUTPUT: &str = "output";
pub const WINDOW_COMMIT: &str = "commit";

/// What a restart means for the attempt it finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Resume it; `strikes` is the count to keep.
    Resume { strikes: u32 },
    /// The daemon died in the same window of this attempt more than [`MAX_STRIKES`] times
    /// in a row: give the attempt up (not a failure of the agent).
    GiveUp { strikes: u32, window: String },
}

/// Judges a restart from the breadcrumb it found (taken from the store), the current
/// boot id and the strikes so far.
pub fn judge(found: Option<&Handling>, boot_now: &str, strikes: u32) -> Verdict {
    let Some(handling) = found else {
        // The daemon died outside every window of this attempt: not its doing.
        return Verdict::Resume { strikes };
    };
    if handling.boot != boot_now || boot_now.is_empty() {
        // The machine restarted (or its boot cannot be told): not the attempt's doing.
        return Verdict::Resume { strikes };
    }
    let strikes = strikes.saturating_add(1);
    if strikes > MAX_STRIKES {
        Verdict::GiveUp {
            strikes,
            window: handling.window.clone(),
        }
    } else {
        Verdict::Resume { strikes }
    }
}

/// The reason a given-up attempt is recorded with.
pub fn give_up_reason(attempt: u32, strikes: u32, window: &str) -> String {
    let what = match window {
        WINDOW_COMMIT => "committing its working tree",
        _ => "handling its output",
    };
    format!(
        "attempt {attempt} was given up: the daemon died {strikes} times in a row while {what}, \
         with nothing stored in between (not counted as the agent's failure; an orchestrator \
         fault worth reporting with the transcript)"
    )
}

/// The machine's boot id (`/proc/sys/kernel/random/boot_id`); empty where there is none.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The breadcrumb for `window` in this boot.
pub fn breadcrumb(window: &str) -> Handling {
    Handling {
        window: window.to_string(),
        boot: boot_id(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crumb(boot: &str) -> Handling {
        Handling {
            window: WINDOW_OUTPUT.into(),
            boot: boot.into(),
        }
    }

    #[test]
    fn a_restart_outside_every_window_never_counts() {
        for strikes in [0, 1, 3, 100] {
            assert_eq!(judge(None, "b1", strikes), Verdict::Resume { strikes });
        }
    }

    #[test]
    fn a_machine_restart_never_counts() {
        assert_eq!(
            judge(Some(&crumb("b0")), "b1", 3),
            Verdict::Resume { strikes: 3 }
        );
        // No boot id to compare: the benefit of the doubt.
        assert_eq!(
            judge(Some(&crumb("")), "", 3),
            Verdict::Resume { strikes: 3 }
        );
    }

    #[test]
    fn dying_in_the_same_window_strikes_until_the_cap() {
        let mut strikes = 0;
        for expected in 1..=MAX_STRIKES {
            match judge(Some(&crumb("b1")), "b1", strikes) {
                Verdict::Resume { strikes: s } => {
                    assert_eq!(s, expected);
                    strikes = s;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            judge(Some(&crumb("b1")), "b1", strikes),
            Verdict::GiveUp {
                strikes: MAX_STRIKES + 1,
                window: WINDOW_OUTPUT.into()
            }
        );
    }

    #[test]
    fn the_reason_names_the_window_and_says_it_is_not_the_agents_failure() {
        let r = give_up_reason(2, 4, WINDOW_COMMIT);
        assert!(r.contains("attempt 2"), "{r}");
        assert!(r.contains("committing its working tree"), "{r}");
        assert!(r.contains("not counted as the agent's failure"), "{r}");
        assert!(give_up_reason(1, 4, WINDOW_OUTPUT).contains("handling its output"));
    }
}
