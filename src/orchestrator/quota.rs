//! Usage limits across tasks (issue 14, DESIGN.md "Usage limits"): which agent of a
//! task's chain may start now, when a task whose whole chain is out runs again, and what a
//! limit an attempt met means for every other task.
//!
//! Quota belongs to (identity, agent) and lives in the store (`store::quota`): once
//! `claude` under identity `personal` is out until T, no task starts `claude@personal`
//! before T; routing takes the next agent of the chain at once, without spending an
//! attempt to find out again. When every agent is out the task is parked: FAILED with
//! `next_attempt_at` = the earliest reset, no attempt and no failure counted, so the
//! daemon (which sleeps until the next retry time) wakes for it. BLOCKED stays for work
//! that failed on its merits.
//!
//! An attempt that ends `quota` records its pair out until the instant its CLI named
//! ([`out_until`]; none, or one in the past: `quota_default_cooldown`; never beyond 31
//! days; [`merge`] keeps a named reset over a later cool-down). Routing skips agents out
//! under the identity they would run as, or that refused their login for this task (kv
//! `agents_refused:<task>`); the fallback used is recorded (kv `quota_fallback:<task>`)
//! and after the reset the preferred agent is first again unless
//! `quota_return_to_preferred: false`. With `quota_handoff: continue` the next attempt's
//! clone gets the limited attempt's changes (`workspace/handoff.rs`).
//!
//! The decisions ([`out_until`], [`merge`], [`pick`], [`wait_of`]) are pure and
//! table-tested; the functions over a [`Store`] only read and write what they decide.
//!
//! Must not: change task state (the pipeline settles FAILED with the time this returns).

use std::collections::BTreeSet;
use std::sync::Mutex;

use chrono::{DateTime, Duration, FixedOffset, Utc};

use crate::agents::quota::hit_reset;
use crate::agents::QuotaHit;
use crate::config::model::QuotaHandoff;
use crate::config::quota::QuotaSettings;
use crate::config::Config;
use crate::domain::{AgentQuota, AgentReset, AttemptStatus, QuotaWait};
use crate::store::quota::handoff_key;
use crate::store::{Store, StoreError};
use crate::workspace::{Author, Handoff, Workspace};

/// The longest a reported reset is believed: a limit that claims to last longer (a typo'd
/// epoch, a misread date) is retried after this, never "forever".
pub const MAX_OUT: Duration = Duration::days(31);

/// The UTC offset the agent CLIs print their wall-clock times in. The attempt containers
/// get no `TZ` and no zone database, so "the machine's local time" the CLIs speak of is
/// UTC there.
pub fn cli_offset() -> FixedOffset {
    FixedOffset::east_opt(0).unwrap_or_else(|| unreachable!("zero is a valid offset"))
}

// ---------------------------------------------------------------- pure decisions

/// Until when an agent that met `hit` at `seen` is out, and whether the CLI said so
/// (`false`: the default cool-down). A reset in the past (a stale epoch, a clock apart)
/// names nothing: the limit was just met, so the cool-down applies.
pub fn out_until(
    hit: Option<&QuotaHit>,
    seen: DateTime<Utc>,
    local: FixedOffset,
    cooldown: std::time::Duration,
) -> (DateTime<Utc>, bool) {
    let cooldown = Duration::from_std(cooldown).unwrap_or(Duration::minutes(15));
    match hit.and_then(|h| hit_reset(h, seen, local)) {
        Some(at) if at > seen => (at.min(seen + MAX_OUT), true),
        _ => (seen + cooldown, false),
    }
}

/// The quota row after a new limit report `new`, given the `stored` one. The newest report
/// wins (a five-hour window that turned into the weekly one moves the reset later; a
/// limit lifted early moves it sooner), except that a default cool-down never shortens a
/// reset the CLI itself named and that is still ahead.
pub fn merge(stored: Option<AgentQuota>, new: AgentQuota) -> AgentQuota {
    match stored {
        Some(old) if old.reported && !new.reported && old.resets_at > new.resets_at => AgentQuota {
            resets_at: old.resets_at,
            reported: true,
            ..new
        },
        _ => new,
    }
}

/// What routing may do with a task's chain now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// Start this agent; `skipped` are the ones before it that are out (chain order).
    Agent {
        agent: String,
        identity: String,
        skipped: Vec<AgentReset>,
    },
    /// Every usable agent is out: wait for these resets (chain order, non-empty).
    Park(Vec<AgentReset>),
    /// No agent of the chain can ever run this task (each refused its login).
    NoAgent,
}

/// The agent to start from `chain` (`(agent, identity)` pairs, preferred first): the first
/// one from position `start` on (wrapping round) that this task has not found refused and
/// that is not out of quota at `now` under its identity.
pub fn pick(
    chain: &[(String, String)],
    out: &[AgentQuota],
    refused: &BTreeSet<String>,
    start: usize,
    now: DateTime<Utc>,
) -> Pick {
    let start = if start < chain.len() { start } else { 0 };
    let order = chain[start..].iter().chain(&chain[..start]);
    let mut skipped = Vec::new();
    for (agent, identity) in order {
        if refused.contains(agent) {
            continue;
        }
        let until = out
            .iter()
            .filter(|q| &q.agent == agent && &q.identity == identity && q.is_out(now))
            .map(|q| q.resets_at)
            .max();
        match until {
            Some(resets_at) => skipped.push(AgentReset {
                agent: agent.clone(),
                identity: identity.clone(),
                resets_at,
            }),
            None => {
                return Pick::Agent {
                    agent: agent.clone(),
                    identity: identity.clone(),
                    skipped,
                }
            }
        }
    }
    if skipped.is_empty() {
        Pick::NoAgent
    } else {
        // Chain order, whatever position the search started from.
        skipped.sort_by_key(|r| chain.iter().position(|(a, _)| *a == r.agent));
        Pick::Park(skipped)
    }
}

/// The wait of a task parked on `resets` (non-empty): until the earliest.
pub fn wait_of(task_id: &str, resets: Vec<AgentReset>, now: DateTime<Utc>) -> Option<QuotaWait> {
    let first = resets.iter().min_by_key(|r| r.resets_at)?.clone();
    Some(QuotaWait {
        task_id: task_id.to_string(),
        until: first.resets_at,
        agent: first.agent,
        identity: first.identity,
        resets,
        parked_at: now,
    })
}

/// Where the search for an agent starts: the preferred agent (position 0), or, when
/// `quota_return_to_preferred` is off, the fallback that took over.
pub fn start_of(
    chain: &[(String, String)],
    fallback: Option<&str>,
    settings: &QuotaSettings,
) -> usize {
    if settings.return_to_preferred {
        return 0;
    }
    fallback
        .and_then(|f| chain.iter().position(|(a, _)| a == f))
        .unwrap_or(0)
}

/// `claude resets 14:05 UTC (in 52 min)` (with the date when it is not today), for a
/// person reading it now.
pub fn reset_words(agent: &str, at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    format!("{agent} resets {}", crate::domain::when::human(at, now))
}

/// The reason a parked task's FAILED transition carries.
pub fn park_reason(wait: &QuotaWait, now: DateTime<Utc>) -> String {
    let each: Vec<String> = wait
        .resets
        .iter()
        .map(|r| {
            format!(
                "{}@{} until {}",
                r.agent,
                r.identity,
                crate::domain::when::clock(r.resets_at, now)
            )
        })
        .collect();
    // Stored and read later: clock times, no countdown that would go stale.
    format!(
        "quota: every agent of the chain is out ({}); waiting for {} to reset at {}, no attempt counted",
        each.join(", "),
        wait.agent,
        crate::domain::when::clock(wait.until, now)
    )
}

/// The identity each agent of `chain` would run under, as the pipeline brokers it: the
/// rule's, else the profile's, else `default_identity`, else the only one; `(none)` when
/// no identities are configured at all.
pub fn identities_for(
    config: &Config,
    rule_identity: Option<&str>,
    chain: &[String],
) -> Vec<(String, String)> {
    chain
        .iter()
        .map(|agent| {
            let identity = match config.agent(agent) {
                Some(profile) => {
                    let named = rule_identity.is_some()
                        || profile.identity.is_some()
                        || config.global().default_identity.is_some();
                    if config.identities().is_empty() && !named {
                        "(none)".to_string()
                    } else {
                        crate::identity::resolve(
                            rule_identity,
                            profile,
                            config.global().default_identity.as_deref(),
                            config.identities(),
                        )
                        .map(|i| i.name.clone())
                        // The attempt fails on it with the reason; quota has nothing to add.
                        .unwrap_or_else(|_| "(unresolved)".to_string())
                    }
                }
                None => "(unknown agent)".to_string(),
            };
            (agent.clone(), identity)
        })
        .collect()
}

// ---------------------------------------------------------------- over the store

use crate::store::quota::{chain_key, fallback_key, refused_key};

/// The agents `task_id` found refusing their login.
pub fn refused(store: &Store, task_id: &str) -> Result<BTreeSet<String>, StoreError> {
    Ok(store
        .kv_get(&refused_key(task_id))?
        .map(|s| {
            s.split(',')
                .filter(|a| !a.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default())
}

/// Records that `agent` refused its login for `task_id` (it is not tried again for it).
pub fn refuse(
    store: &Store,
    task_id: &str,
    agent: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let mut set = refused(store, task_id)?;
    set.insert(agent.to_string());
    let list: Vec<&str> = set.iter().map(String::as_str).collect();
    store.kv_set(&refused_key(task_id), &list.join(","), now)
}

/// What routing does for a task now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Run this agent.
    Agent(String),
    /// Park the task until `wait.until` (recorded in the store).
    Park(QuotaWait),
    /// No agent of the chain can run it (each refused its login).
    NoAgent,
}

/// Chooses the agent for a task's next attempt from its routed `chain`, skipping agents
/// out of quota under the identity each would use, and records the outcome: the chain with
/// its identities, the fallback used while the preferred agent is out, or the wait.
pub fn choose(
    store: &Store,
    config: &Config,
    task_id: &str,
    rule_identity: Option<&str>,
    chain: &[String],
    now: DateTime<Utc>,
) -> Result<Choice, StoreError> {
    let pairs = identities_for(config, rule_identity, chain);
    if let Ok(json) = serde_json::to_string(&pairs) {
        store.kv_set(&chain_key(task_id), &json, now)?;
    }
    decide(store, config, task_id, &pairs, now)
}

/// The same choice after an attempt of `task_id` met a limit or a refused login: over the
/// chain [`choose`] recorded (or `chain` with the attempt's own identity when there is
/// none, after an upgrade).
pub fn after_attempt(
    store: &Store,
    config: &Config,
    task_id: &str,
    chain: &[String],
    now: DateTime<Utc>,
) -> Result<Choice, StoreError> {
    let recorded: Option<Vec<(String, String)>> = store
        .kv_get(&chain_key(task_id))?
        .and_then(|json| serde_json::from_str(&json).ok());
    let pairs = match recorded {
        Some(p) if !p.is_empty() => p,
        _ => identities_for(config, None, chain),
    };
    decide(store, config, task_id, &pairs, now)
}

fn decide(
    store: &Store,
    config: &Config,
    task_id: &str,
    pairs: &[(String, String)],
    now: DateTime<Utc>,
) -> Result<Choice, StoreError> {
    let settings = config.quota_settings();
    let out = store.quota_out(now)?;
    let refused = refused(store, task_id)?;
    let fallback: Option<serde_json::Value> = store
        .kv_get(&fallback_key(task_id))?
        .and_then(|j| serde_json::from_str(&j).ok());
    let current = fallback
        .as_ref()
        .and_then(|f| f.get("agent"))
        .and_then(|a| a.as_str());
    let start = start_of(pairs, current, &settings);
    Ok(match pick(pairs, &out, &refused, start, now) {
        Pick::Agent {
            agent,
            identity,
            skipped,
        } => {
            store.clear_quota_wait(task_id)?;
            let preferred = pairs.first().map(|(a, _)| a.as_str()).unwrap_or("");
            if agent != preferred {
                // The fallback used meanwhile, for `status TASK` (and, with
                // `quota_return_to_preferred: false`, where the next search starts).
                let record = serde_json::json!({
                    "preferred": preferred,
                    "agent": agent,
                    "identity": identity,
                    "because": skipped,
                    "since": now,
                });
                store.kv_set(&fallback_key(task_id), &record.to_string(), now)?;
                if !skipped.is_empty() {
                    tracing::info!(
                        task = %task_id,
                        "quota: {} out; falling back to {agent}",
                        skipped
                            .iter()
                            .map(|r| format!("{}@{} until {}", r.agent, r.identity, r.resets_at.format("%H:%M:%S UTC")))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
            } else if fallback.is_some() {
                tracing::info!(task = %task_id, "quota: back to the preferred agent {agent}");
                store.kv_set(&fallback_key(task_id), "null", now)?;
            }
            Choice::Agent(agent)
        }
        Pick::Park(resets) => match wait_of(task_id, resets, now) {
            Some(wait) => {
                store.set_quota_wait(&wait)?;
                Choice::Park(wait)
            }
            None => Choice::NoAgent,
        },
        Pick::NoAgent => Choice::NoAgent,
    })
}

/// The fallback `task_id` runs on while its preferred agent is out, if any (JSON:
/// preferred, agent, identity, because, since).
pub fn fallback_of(store: &Store, task_id: &str) -> Result<Option<serde_json::Value>, StoreError> {
    Ok(store
        .kv_get(&fallback_key(task_id))?
        .and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok())
        .filter(|v| !v.is_null()))
}

/// The usage limit one attempt met: which agent under which identity, and what the CLI
/// said of it.
#[derive(Debug, Clone, Copy)]
pub struct LimitMet<'a> {
    pub identity: &'a str,
    pub agent: &'a str,
    /// The CLI's report, with its reset time when it gave one.
    pub hit: Option<&'a QuotaHit>,
    /// Already scrubbed.
    pub message: &'a str,
    pub task_id: &'a str,
    pub attempt: u32,
}

/// Records that the agent and identity of `met` met a usage limit, so no task starts
/// them before the reset.
pub fn record_hit(
    store: &Store,
    settings: &QuotaSettings,
    met: LimitMet<'_>,
    now: DateTime<Utc>,
) -> Result<AgentQuota, StoreError> {
    let LimitMet {
        identity,
        agent,
        hit,
        message,
        task_id,
        attempt,
    } = met;
    let (resets_at, reported) = out_until(hit, now, cli_offset(), settings.default_cooldown);
    let new = AgentQuota {
        identity: identity.to_string(),
        agent: agent.to_string(),
        resets_at,
        reported,
        message: crate::orchestrator::verify::first_line(message),
        task_id: Some(task_id.to_string()),
        attempt: Some(attempt),
        hit_at: now,
    };
    let row = store.update_quota(identity, agent, |stored| merge(stored, new))?;
    tracing::info!(
        %agent, %identity, task = %task_id, attempt,
        "out of quota until {}{}",
        row.resets_at.format("%Y-%m-%d %H:%M:%S UTC"),
        if row.reported { "" } else { " (no reset time given: default cool-down)" }
    );
    Ok(row)
}

// ---------------------------------------------------------------- handoff

/// The most paths a handoff note lists.
const HANDOFF_PATHS: usize = 40;

/// What the next agent's prompt says of the work it continues (in place of the previous
/// attempt's failures).
pub fn handoff_text(agent: &str, attempt: u32, handoff: &Handoff) -> String {
    let mut out = format!(
        "Attempt {attempt} ({agent}) stopped at its usage limit before it finished. Its changes \
         so far are already in /workspace (the diff against the base below); continue from \
         them: check what is there, keep what is right and finish the task.\n"
    );
    for (status, path) in handoff.changes.iter().take(HANDOFF_PATHS) {
        out.push_str(&format!("  {status} {path}\n"));
    }
    if handoff.changes.len() > HANDOFF_PATHS {
        out.push_str(&format!(
            "  ({} more paths)\n",
            handoff.changes.len() - HANDOFF_PATHS
        ));
    }
    out
}

/// The handoff note recorded for `attempt`, if its agent continues a limited attempt.
pub fn handoff_note(store: &Store, task_id: &str, attempt: u32) -> Option<String> {
    store.kv_get(&handoff_key(task_id, attempt)).ok().flatten()
}

/// `quota_handoff: continue`: when attempt `attempt - 1` met a usage limit, its work is
/// carried into `ws` (the fresh clone of `attempt`) and the prompt note recorded.
/// Best effort: anything
/// that goes wrong leaves a fresh attempt, logged.
pub async fn continue_after_limit(
    orch: &super::Orchestrator,
    store: &Mutex<Store>,
    task_id: &str,
    attempt: u32,
    ws: &Workspace,
) {
    if orch.config.quota_settings().handoff != QuotaHandoff::Continue || attempt < 2 {
        return;
    }
    let found = {
        let db = store.lock().unwrap_or_else(|p| p.into_inner());
        let record = db.attempt(task_id, attempt - 1).ok().flatten();
        let from: Option<Workspace> = db.workspace_of(task_id, attempt - 1).ok().flatten();
        record
            .filter(|r| r.status == Some(AttemptStatus::Quota))
            .zip(from)
    };
    let Some((record, from)) = found.filter(|(_, from)| from.path.is_dir()) else {
        return;
    };
    let git = &orch.config.global().git;
    let author = Author {
        name: git.author_name.clone(),
        email: git.author_email.clone(),
    };
    let manager = orch.workspaces.clone();
    let to = ws.clone();
    let carried = tokio::task::spawn_blocking(move || manager.hand_over(&from, &to, &author)).await;
    match carried {
        Ok(Ok(Some(handoff))) => {
            let note = handoff_text(&record.agent, record.attempt, &handoff);
            tracing::info!(
                task = %task_id, attempt,
                "quota handoff: continuing attempt {}'s work ({} path(s))",
                record.attempt,
                handoff.changes.len()
            );
            let db = store.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = db.kv_set(&handoff_key(task_id, attempt), &note, orch.now()) {
                tracing::warn!(task = %task_id, error = %e, "cannot record the handoff note");
            }
        }
        Ok(Ok(None)) => {
            tracing::info!(task = %task_id, attempt, "quota handoff: the limited attempt changed nothing")
        }
        Ok(Err(e)) => {
            tracing::warn!(task = %task_id, attempt, error = %e, "quota handoff failed; starting fresh")
        }
        Err(e) => {
            tracing::warn!(task = %task_id, attempt, error = %e, "quota handoff failed; starting fresh")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 14, 0, 0).unwrap()
    }

    fn mins(n: i64) -> DateTime<Utc> {
        now() + Duration::minutes(n)
    }

    fn out(agent: &str, identity: &str, until: DateTime<Utc>, reported: bool) -> AgentQuota {
        AgentQuota {
            identity: identity.into(),
            agent: agent.into(),
            resets_at: until,
            reported,
            message: "limit".into(),
            task_id: None,
            attempt: None,
            hit_at: now(),
        }
    }

    fn chain(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(a, i)| (a.to_string(), i.to_string()))
            .collect()
    }

    fn reset(agent: &str, identity: &str, at: DateTime<Utc>) -> AgentReset {
        AgentReset {
            agent: agent.into(),
            identity: identity.into(),
            resets_at: at,
        }
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn out_until_uses_the_reported_reset_or_the_cooldown() {
        let cooldown = std::time::Duration::from_secs(15 * 60);
        let utc = cli_offset();
        let hit = |text: &str| crate::agents::quota::hit(text);
        let check = |h: Option<QuotaHit>, want: (DateTime<Utc>, bool)| {
            assert_eq!(out_until(h.as_ref(), now(), utc, cooldown), want, "{h:?}");
        };
        // 1796054700 = 2026-11-30 16:05:00 UTC.
        check(
            Some(hit("Claude AI usage limit reached|1796054700")),
            (mins(125), true),
        );
        check(Some(hit("try again in 1 hour 5 minutes")), (mins(65), true));
        check(Some(hit("try again at 3:28 PM")), (mins(88), true));
        // No time, a past epoch (the fake CLI's old fixed one), or none at all: cool-down.
        check(Some(hit("Please try again later.")), (mins(15), false));
        check(
            Some(hit("Claude AI usage limit reached|1767225600")),
            (mins(15), false),
        );
        check(None, (mins(15), false));
        // Never believed beyond MAX_OUT.
        check(
            Some(hit("Claude AI usage limit reached|4102444800")),
            (now() + MAX_OUT, true),
        );
    }

    #[test]
    fn merging_reports() {
        let m = |stored: Option<AgentQuota>, new: AgentQuota| {
            let got = merge(stored, new);
            (got.resets_at, got.reported)
        };
        // Nothing stored, or the newest report: it wins, later or sooner.
        assert_eq!(m(None, out("c", "p", mins(10), true)), (mins(10), true));
        assert_eq!(
            m(
                Some(out("c", "p", mins(10), true)),
                out("c", "p", mins(300), true)
            ),
            (mins(300), true)
        );
        assert_eq!(
            m(
                Some(out("c", "p", mins(300), true)),
                out("c", "p", mins(10), true)
            ),
            (mins(10), true)
        );
        // A cool-down never shortens a named reset still ahead...
        assert_eq!(
            m(
                Some(out("c", "p", mins(300), true)),
                out("c", "p", mins(15), false)
            ),
            (mins(300), true)
        );
        // ...but extends one that is nearer, and replaces an older cool-down.
        assert_eq!(
            m(
                Some(out("c", "p", mins(5), true)),
                out("c", "p", mins(15), false)
            ),
            (mins(15), false)
        );
        assert_eq!(
            m(
                Some(out("c", "p", mins(5), false)),
                out("c", "p", mins(15), false)
            ),
            (mins(15), false)
        );
    }

    #[test]
    fn picking_an_agent() {
        let c = chain(&[
            ("claude", "personal"),
            ("codex", "personal"),
            ("kimi", "work"),
        ]);
        let check = |out: &[AgentQuota], refused: &[&str], start: usize, want: Pick| {
            assert_eq!(
                pick(&c, out, &set(refused), start, now()),
                want,
                "{out:?} {refused:?} {start}"
            );
        };
        let agent = |a: &str, i: &str, skipped: Vec<AgentReset>| Pick::Agent {
            agent: a.into(),
            identity: i.into(),
            skipped,
        };
        // Nobody out: the preferred agent.
        check(&[], &[], 0, agent("claude", "personal", vec![]));
        // Out under the identity it would use: skipped at once.
        check(
            &[out("claude", "personal", mins(30), true)],
            &[],
            0,
            agent(
                "codex",
                "personal",
                vec![reset("claude", "personal", mins(30))],
            ),
        );
        // Out under another identity, or no longer out: not skipped.
        check(
            &[out("claude", "work", mins(30), true)],
            &[],
            0,
            agent("claude", "personal", vec![]),
        );
        check(
            &[out("claude", "personal", mins(-1), true)],
            &[],
            0,
            agent("claude", "personal", vec![]),
        );
        check(
            &[out("claude", "personal", now(), true)],
            &[],
            0,
            agent("claude", "personal", vec![]),
        );
        // A refused login is passed over without a reset.
        check(&[], &["claude"], 0, agent("codex", "personal", vec![]));
        // Everyone usable is out: park on every reset, chain order.
        check(
            &[
                out("claude", "personal", mins(30), true),
                out("codex", "personal", mins(5), true),
                out("kimi", "work", mins(90), false),
            ],
            &[],
            0,
            Pick::Park(vec![
                reset("claude", "personal", mins(30)),
                reset("codex", "personal", mins(5)),
                reset("kimi", "work", mins(90)),
            ]),
        );
        check(
            &[
                out("codex", "personal", mins(5), true),
                out("kimi", "work", mins(90), true),
            ],
            &["claude"],
            0,
            Pick::Park(vec![
                reset("codex", "personal", mins(5)),
                reset("kimi", "work", mins(90)),
            ]),
        );
        // Every agent refused: nothing to wait for.
        check(&[], &["claude", "codex", "kimi"], 0, Pick::NoAgent);
        // Staying on the fallback: the search starts there and wraps round.
        check(&[], &[], 1, agent("codex", "personal", vec![]));
        check(
            &[out("kimi", "work", mins(9), true)],
            &[],
            2,
            agent("claude", "personal", vec![reset("kimi", "work", mins(9))]),
        );
        check(&[], &[], 7, agent("claude", "personal", vec![]));
    }

    #[test]
    fn parking_waits_for_the_earliest_reset() {
        let w = wait_of(
            "local-1",
            vec![reset("claude", "p", mins(30)), reset("codex", "p", mins(5))],
            now(),
        )
        .unwrap();
        assert_eq!((w.until, w.agent.as_str()), (mins(5), "codex"));
        assert_eq!(
            park_reason(&w, now()),
            "quota: every agent of the chain is out (claude@p until 14:30 UTC, codex@p until 14:05 UTC); waiting for codex to reset at 14:05 UTC, no attempt counted"
        );
        assert_eq!(wait_of("local-1", vec![], now()), None);
        assert_eq!(
            reset_words("claude", mins(60 * 24), now()),
            "claude resets Dec 01 14:00 UTC (in 1 d)"
        );
        assert_eq!(
            reset_words("claude", mins(52), now()),
            "claude resets 14:52 UTC (in 52 min)"
        );
    }

    #[test]
    fn handoff_notes_name_the_diff() {
        let h = Handoff {
            sha: "0".repeat(40),
            changes: vec![('M', "calc.sh".into()), ('A', "notes.md".into())],
        };
        assert_eq!(
            handoff_text("claude", 1, &h),
            "Attempt 1 (claude) stopped at its usage limit before it finished. Its changes so far are already in /workspace (the diff against the base below); continue from them: check what is there, keep what is right and finish the task.\n  M calc.sh\n  A notes.md\n"
        );
        let many = Handoff {
            sha: "0".repeat(40),
            changes: (0..45).map(|i| ('A', format!("f{i}"))).collect(),
        };
        assert!(handoff_text("codex", 2, &many).ends_with("  A f39\n  (5 more paths)\n"));
    }

    #[test]
    fn the_search_starts_at_the_preferred_agent_unless_told_to_stay() {
        let c = chain(&[("claude", "p"), ("codex", "p")]);
        let mut s = QuotaSettings {
            default_cooldown: std::time::Duration::from_secs(900),
            handoff: crate::config::model::QuotaHandoff::Fresh,
            return_to_preferred: true,
        };
        assert_eq!(start_of(&c, Some("codex"), &s), 0);
        s.return_to_preferred = false;
        assert_eq!(start_of(&c, Some("codex"), &s), 1);
        assert_eq!(start_of(&c, Some("gone"), &s), 0);
        assert_eq!(start_of(&c, None, &s), 0);
    }
}
