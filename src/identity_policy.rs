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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().expect("a timestamp")
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
