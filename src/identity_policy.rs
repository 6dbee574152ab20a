//! Policies over identities that the attempt pipeline applies (spec §7, DESIGN.md
//! "Identities"): running without any identity when none is configured, and the daily cost
//! ceiling of an identity.
//!
//! Pure: the caller passes what the config names, the day's spend and `now`.

use chrono::{DateTime, Duration, Utc};

use crate::identity::Brokered;

/// Whether the agent runs without credentials: no identities.yaml at all and nothing
/// (routing rule, agent profile, `default_identity`) names one. Then the agent reports its
/// own authentication error if it needs one; naming an identity that does not exist stays
/// an error.
pub fn runs_without_identity(identities_defined: usize, named: &[Option<&str>]) -> bool {
    identities_defined == 0 && named.iter().all(Option::is_none)
}

/// The identity of an agent that runs without credentials.
pub fn no_identity() -> Brokered {
    Brokered {
        identity: "(none)".into(),
        volume_mounts: Vec::new(),
        env_overlay: Vec::new(),
        cost_ceiling_usd_per_day: None,
    }
}

/// The start of `now`'s UTC day: the cost ceiling counts spend since then.
pub fn utc_day_start(now: DateTime<Utc>) -> DateTime<Utc> {
    now.date_naive()
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc())
        .unwrap_or(now)
}

/// Whether `spent` today reaches the identity's ceiling.
pub fn over_ceiling(spent: f64, ceiling: f64) -> bool {
    spent >= ceiling
}

/// The attempt whose reported cost weighs most today: `(task, attempt, cost)`.
pub type LargestCost<'a> = (&'a str, u32, f64);

/// An identity held until its next UTC day.
#[derive(Debug, Clone, PartialEq)]
pub struct CeilingHold {
    pub reason: String,
    pub until: DateTime<Utc>,
}

/// The hold of an identity over its ceiling: until the next 00:00 UTC, naming the largest
/// attempt so one forged or runaway report never holds an identity silently.
pub fn ceiling_hold(
    identity: &str,
    spent: f64,
    ceiling: f64,
    now: DateTime<Utc>,
    largest: Option<LargestCost<'_>>,
) -> CeilingHold {
    let largest = largest
        .map(|(task, attempt, cost)| {
            format!(" (largest: {task} attempt {attempt}, ${cost:.2}; check it with `polyphony status {task}`)")
        })
        .unwrap_or_default();
    CeilingHold {
        reason: format!(
            "identity `{identity}` spent ${spent:.2} of its ${ceiling:.2} daily ceiling; waits until 00:00 UTC{largest}"
        ),
        until: utc_day_start(now) + Duration::days(1),
    }
}

/// How long an attempt held by the reservations of running attempts waits before it asks
/// again (one of them may have ended by then, freeing its reservation).
pub const RESERVED_RECHECK: Duration = Duration::seconds(10);

/// The hold of an attempt whose identity's finished spend (`spent`) plus the reservations
/// of its `running` attempts (`reserved`, each the per-attempt cap) reach the ceiling: if
/// the spend alone does, until the next 00:00 UTC; otherwise a short wait for a running
/// attempt to end ([`RESERVED_RECHECK`]).
pub fn reserved_hold(
    identity: &str,
    spent: f64,
    running: u32,
    reserved: f64,
    ceiling: f64,
    now: DateTime<Utc>,
) -> CeilingHold {
    if over_ceiling(spent, ceiling) {
        return ceiling_hold(identity, spent, ceiling, now, None);
    }
    let plural = if running == 1 { "" } else { "s" };
    CeilingHold {
        reason: format!(
            "identity `{identity}` spent ${spent:.2} of its ${ceiling:.2} daily ceiling and {running} running attempt{plural} may spend ${reserved:.2} more; waits for one to end"
        ),
        until: now + RESERVED_RECHECK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().expect("a timestamp")
    }

    #[test]
    fn a_start_held_by_running_attempts_waits_briefly_and_one_over_the_spend_till_tomorrow() {
        let now = at("2026-12-01T10:00:00Z");
        let short = reserved_hold("demo", 0.04, 2, 0.10, 0.12, now);
        assert_eq!(short.until, now + RESERVED_RECHECK);
        assert!(
            short
                .reason
                .contains("2 running attempts may spend $0.10 more"),
            "{}",
            short.reason
        );
        let day = reserved_hold("demo", 0.12, 1, 0.05, 0.12, now);
        assert_eq!(day.until, at("2026-12-02T00:00:00Z"));
    }

    #[test]
    fn without_identity_only_when_none_is_defined_or_named() {
        for (defined, named, want) in [
            (0, vec![None, None, None], true),
            (0, vec![Some("work"), None, None], false),
            (0, vec![None, None, Some("default")], false),
            (1, vec![None, None, None], false),
            (2, vec![Some("work"), None, None], false),
        ] {
            assert_eq!(
                runs_without_identity(defined, &named),
                want,
                "{defined} {named:?}"
            );
        }
        assert_eq!(no_identity().identity, "(none)");
    }

    #[test]
    fn ceiling_holds_until_the_next_utc_day() {
        assert!(!over_ceiling(4.99, 5.0));
        assert!(over_ceiling(5.0, 5.0));
        assert!(over_ceiling(7.0, 5.0));
        assert_eq!(
            utc_day_start(at("2026-11-30T23:59:59Z")),
            at("2026-11-30T00:00:00Z")
        );
        let hold = ceiling_hold("work", 5.5, 5.0, at("2026-11-30T13:00:00Z"), None);
        assert_eq!(hold.until, at("2026-12-01T00:00:00Z"));
        assert_eq!(
            hold.reason,
            "identity `work` spent $5.50 of its $5.00 daily ceiling; waits until 00:00 UTC"
        );
        let hold = ceiling_hold(
            "work",
            9.0,
            5.0,
            at("2026-11-30T00:00:00Z"),
            Some(("local-1", 2, 8.25)),
        );
        assert_eq!(hold.until, at("2026-12-01T00:00:00Z"));
        assert!(
            hold.reason.ends_with(
                "(largest: local-1 attempt 2, $8.25; check it with `polyphony status local-1`)"
            ),
            "{}",
            hold.reason
        );
    }
}
