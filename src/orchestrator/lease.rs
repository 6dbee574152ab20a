//! This daemon's claims in a fleet (issue 27, docs/SCALING.md "Ownership and leases"): who
//! it is ([`Owner`]), how long its leases run, when it last renewed them, and the one rule
//! every external side effect obeys — act on a task only while this daemon holds its lease
//! with a third of the lease to spare ([`verdict`]).
//!
//! A daemon that cannot renew (the store unreachable, a partition) stops claiming once its
//! own leases could have run below that margin ([`Leases::may_start`]) and refuses to push
//! ([`Leases::check`]): the daemon that takes the task over waits for the lease to expire,
//! so at most one daemon acts on a task at a time.
//!
//! Must not: decide what a taken-over task becomes (the daemon's reconcile does).

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::store::{Claim, Owner};

/// This home's machine id: `store.machine`, else the host name.
pub fn machine_id(config: &crate::config::Config) -> String {
    config
        .store_machine()
        .map(String::from)
        .unwrap_or_else(crate::store::host_machine_id)
}

/// Whether a daemon may act on a task now, from the task's stored claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Ours (or unowned: a claim written without an owner, by `spawn` or before schema 8).
    Held,
    /// Another daemon holds it now.
    Taken { by: String },
    /// Ours, but with less than the margin left: it may expire under us.
    Expiring { until: DateTime<Utc> },
}

/// A lease as a chrono span (`store.lease` is bounded to an hour by the config).
fn span(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::days(1))
}

/// The margin a side effect needs: a third of the lease.
pub fn margin(lease: Duration) -> chrono::Duration {
    span(lease / 3)
}

/// See [`Verdict`]: pure, table-tested.
pub fn verdict(claim: Option<&Claim>, me: &Owner, now: DateTime<Utc>, lease: Duration) -> Verdict {
    match claim {
        None => Verdict::Held,
        Some(c) if c.owner != me.key() => Verdict::Taken {
            by: c.owner.clone(),
        },
        Some(c) if c.lease_until - now <= margin(lease) => Verdict::Expiring {
            until: c.lease_until,
        },
        Some(_) => Verdict::Held,
    }
}

/// Whether the daemon's last successful renewal (at `renewed`) still leaves its leases the
/// margin at `now`.
pub fn renewal_fresh(renewed: DateTime<Utc>, now: DateTime<Utc>, lease: Duration) -> bool {
    renewed + span(lease) - now > margin(lease)
}

/// This process as the owner of its claims, with its lease settings and its last renewal.
#[derive(Debug)]
pub struct Leases {
    pub owner: Owner,
    pub lease: Duration,
    pub heartbeat: Duration,
    renewed: Mutex<Option<DateTime<Utc>>>,
    /// Whether "claiming nothing" was said since the last renewal ([`Leases::first_refusal`]).
    refusal_said: std::sync::atomic::AtomicBool,
}

/// Why a side effect was refused: the lease is not (safely) this daemon's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseLost {
    #[error("the lease of {task} is held by {by} now: this daemon does not act on it")]
    Taken { task: String, by: String },
    #[error("the lease of {task} runs out at {until} (under a third of the lease left): this daemon does not act on it")]
    Expiring { task: String, until: DateTime<Utc> },
    #[error("this daemon could not renew its leases since {since}: it does not act on {task}")]
    Stale { task: String, since: DateTime<Utc> },
}

impl Leases {
    pub fn new(owner: Owner, lease: Duration, heartbeat: Duration) -> Leases {
        Leases {
            owner,
            lease,
            heartbeat,
            renewed: Mutex::new(None),
            refusal_said: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Records a successful renewal (or a start: the store answered) at `now`.
    pub fn renewed(&self, now: DateTime<Utc>) {
        *self.renewed.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        self.refusal_said
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// `true` the first time it is asked since the last renewal: a daemon that claims
    /// nothing for stale leases says so once per outage, not at every poll.
    pub fn first_refusal(&self) -> bool {
        !self
            .refusal_said
            .swap(true, std::sync::atomic::Ordering::Relaxed)
    }

    fn last_renewal(&self) -> Option<DateTime<Utc>> {
        *self.renewed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the daemon may start work at `now`: it renewed recently enough (or has not
    /// started its heartbeat: a verb driving one task, whose claim carries no owner).
    pub fn may_start(&self, now: DateTime<Utc>) -> bool {
        self.last_renewal()
            .is_none_or(|at| renewal_fresh(at, now, self.lease))
    }

    /// Before a push, a pull request or a landing comment: the task's lease is this
    /// daemon's with the margin to spare by the store's clock (`lease_now`, read after the
    /// claim: `store::QueueCore::lease_clock`), and the daemon's renewals are fresh by its
    /// own (`now`).
    pub fn check(
        &self,
        task: &str,
        claim: Option<&Claim>,
        now: DateTime<Utc>,
        lease_now: DateTime<Utc>,
    ) -> Result<(), LeaseLost> {
        if let Some(since) = self.last_renewal() {
            if !renewal_fresh(since, now, self.lease) {
                return Err(LeaseLost::Stale {
                    task: task.into(),
                    since,
                });
            }
        }
        match verdict(claim, &self.owner, lease_now, self.lease) {
            Verdict::Held => Ok(()),
            Verdict::Taken { by } => Err(LeaseLost::Taken {
                task: task.into(),
                by,
            }),
            Verdict::Expiring { until } => Err(LeaseLost::Expiring {
                task: task.into(),
                until,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn me() -> Owner {
        Owner {
            machine: "m1".into(),
            pid: 7,
            nonce: "abc".into(),
        }
    }

    fn claim(owner: &str, until: DateTime<Utc>) -> Claim {
        Claim {
            task_id: "t".into(),
            machine: owner.split('/').next().unwrap().into(),
            owner: owner.into(),
            lease_until: until,
        }
    }

    #[test]
    fn a_stale_daemon_says_it_claims_nothing_once_per_outage() {
        let leases = Leases::new(me(), Duration::from_secs(60), Duration::from_secs(20));
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        assert!(leases.first_refusal());
        assert!(!leases.first_refusal());
        leases.renewed(now);
        assert!(leases.first_refusal());
        assert!(!leases.first_refusal());
    }

    #[test]
    fn verdicts() {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let lease = Duration::from_secs(60);
        let s = chrono::Duration::seconds;
        let mine = me().key();
        for (claim, expect) in [
            (None, Verdict::Held),
            (Some(claim(&mine, now + s(60))), Verdict::Held),
            (Some(claim(&mine, now + s(21))), Verdict::Held),
            (
                Some(claim(&mine, now + s(20))),
                Verdict::Expiring { until: now + s(20) },
            ),
            (
                Some(claim(&mine, now - s(5))),
                Verdict::Expiring { until: now - s(5) },
            ),
            (
                Some(claim("m2/9/zz", now + s(60))),
                Verdict::Taken {
                    by: "m2/9/zz".into(),
                },
            ),
            // Same machine, another process: not ours either.
            (
                Some(claim("m1/8/old", now + s(60))),
                Verdict::Taken {
                    by: "m1/8/old".into(),
                },
            ),
        ] {
            assert_eq!(verdict(claim.as_ref(), &me(), now, lease), expect);
        }
    }

    #[test]
    fn a_daemon_that_cannot_renew_stops_starting_and_acting() {
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
        let s = chrono::Duration::seconds;
        let leases = Leases::new(me(), Duration::from_secs(60), Duration::from_secs(10));
        // Before the heartbeat starts (a verb driving one task): nothing to be stale.
        assert!(leases.may_start(t0 + s(3600)));
        leases.renewed(t0);
        assert!(leases.may_start(t0 + s(39)));
        assert!(!leases.may_start(t0 + s(40)));
        let held = claim(&me().key(), t0 + s(60));
        assert_eq!(
            leases.check("t", Some(&held), t0 + s(10), t0 + s(10)),
            Ok(())
        );
        assert!(matches!(
            leases.check("t", Some(&held), t0 + s(41), t0 + s(10)),
            Err(LeaseLost::Stale { .. })
        ));
        leases.renewed(t0 + s(41));
        // Renewed in memory but the row says it runs out soon: still refused.
        assert!(matches!(
            leases.check("t", Some(&held), t0 + s(45), t0 + s(45)),
            Err(LeaseLost::Expiring { .. })
        ));
        // The claim is judged by the store's clock, the renewals by the daemon's: a daemon
        // an hour ahead of the store neither refuses its live lease nor, an hour behind,
        // acts on one that runs out.
        leases.renewed(t0 + s(3600));
        assert_eq!(
            leases.check("t", Some(&held), t0 + s(3610), t0 + s(10)),
            Ok(())
        );
        leases.renewed(t0 - s(3600));
        assert!(matches!(
            leases.check("t", Some(&held), t0 - s(3590), t0 + s(45)),
            Err(LeaseLost::Expiring { .. })
        ));
    }
}
