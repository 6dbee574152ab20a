//! Prometheus metrics of this process (docs/metrics.md), served by the daemon at `/metrics`
//! in the OpenMetrics text format.
//!
//! One process-wide registry: the layers that see an event count it where it happens (the
//! store for attempt results, claims and write latency, the runtime for containers, the
//! GitHub client for requests and the rate limit). Counters and histograms start at zero
//! with the process, as Prometheus expects; gauges that describe the queue (`tasks` by
//! state) are read from the store at scrape time, so they are right for every process that
//! shares the home.
//!
//! Must not: take a label value from agent or issue text (only agent, identity, state and
//! outcome names from config and the domain), or block: every update is an atomic add.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::domain::{AttemptStatus, TaskState};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub agent: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabels {
    pub agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpendLabels {
    pub identity: String,
    pub agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub identity: String,
    pub agent: String,
    /// `input`, `output` or `cached_input`.
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ContainerLabels {
    /// `started` or `failed` (the engine refused to create or start it).
    pub result: String,
}

/// The label set of a series with no labels, for a gauge that may be absent.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NoLabels {}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EgressLabels {
    /// `allowed` or `refused`.
    pub result: String,
    /// For a refusal, its code (`not_allowed`, `ip_literal`, `private_address`, ...);
    /// empty for an allowed connection.
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GithubLabels {
    pub method: String,
    /// The HTTP status, or `error` when no answer came.
    pub status: String,
}

fn duration_histogram() -> Histogram {
    // 1 s … about 4.5 h: agent attempts run minutes, checks seconds.
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

/// Every metric this process exports.
pub struct Metrics {
    registry: Registry,
    attempts: Family<AttemptLabels, Counter>,
    attempt_duration: Family<AgentLabels, Histogram, fn() -> Histogram>,
    verification_duration: Histogram,
    queue_wait: Histogram,
    cost: Family<SpendLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    tokens: Family<TokenLabels, Counter>,
    quota_hits: Family<AgentLabels, Counter>,
    containers: Family<ContainerLabels, Counter>,
    egress_connections: Family<EgressLabels, Counter>,
    egress_networks: Family<ContainerLabels, Counter>,
    github_requests: Family<GithubLabels, Counter>,
    /// Absent until GitHub answered: a daemon that never talked to GitHub has no rate
    /// limit to report, and a 0 would fire every low-rate-limit alert (issue 29). One
    /// series with no labels, made on the first answer.
    github_rate_limit_remaining: Family<NoLabels, Gauge>,
    store_write: Histogram,
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("polyphony");
        let m = Metrics {
            attempts: Family::default(),
            attempt_duration: Family::new_with_constructor(duration_histogram),
            verification_duration: duration_histogram(),
            queue_wait: duration_histogram(),
            cost: Family::default(),
            tokens: Family::default(),
            quota_hits: Family::default(),
            containers: Family::default(),
            egress_connections: Family::default(),
            egress_networks: Family::default(),
            github_requests: Family::default(),
            github_rate_limit_remaining: Family::default(),
            // 100 µs … about 3 s.
            store_write: Histogram::new(exponential_buckets(0.0001, 2.0, 15)),
            registry: Registry::default(),
        };
        registry.register(
            "attempts",
            "Attempts that ended, by agent and outcome",
            m.attempts.clone(),
        );
        registry.register(
            "attempt_duration_seconds",
            "How long the agent ran, per attempt",
            m.attempt_duration.clone(),
        );
        registry.register(
            "verification_duration_seconds",
            "Time spent in the verification checks of one attempt",
            m.verification_duration.clone(),
        );
        registry.register(
            "queue_wait_seconds",
            "From a task entering the queue to its first claim",
            m.queue_wait.clone(),
        );
        registry.register(
            "cost_usd",
            "Agent cost reported by the CLIs, in US dollars",
            m.cost.clone(),
        );
        registry.register(
            "tokens",
            "Tokens reported by the CLIs, by kind",
            m.tokens.clone(),
        );
        registry.register(
            "quota_hits",
            "Attempts that ended on a usage limit",
            m.quota_hits.clone(),
        );
        registry.register(
            "containers",
            "Agent and check containers created, by result",
            m.containers.clone(),
        );
        registry.register(
            "egress_connections",
            "Connections agents asked their egress proxy for, by result and refusal reason",
            m.egress_connections.clone(),
        );
        registry.register(
            "egress_networks",
            "Per-attempt egress networks created, by result",
            m.egress_networks.clone(),
        );
        registry.register(
            "github_requests",
            "Requests sent to the GitHub API, by method and status",
            m.github_requests.clone(),
        );
        registry.register(
            "github_rate_limit_remaining",
            "x-ratelimit-remaining of the last GitHub answer",
            m.github_rate_limit_remaining.clone(),
        );
        registry.register(
            "store_write_duration_seconds",
            "Duration of one store write transaction",
            m.store_write.clone(),
        );
        Metrics { registry, ..m }
    }
}

/// The process-wide metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// One attempt ended (the store calls this when it records the result).
pub fn attempt_finished(
    agent: &str,
    identity: &str,
    status: AttemptStatus,
    duration_seconds: f64,
    cost_usd: Option<f64>,
    tokens: &crate::domain::TokenUsage,
    verification_ms: u64,
) {
    let m = get();
    m.attempts
        .get_or_create(&AttemptLabels {
            agent: agent.to_string(),
            outcome: status.as_str().to_string(),
        })
        .inc();
    let agent_labels = AgentLabels {
        agent: agent.to_string(),
    };
    m.attempt_duration
        .get_or_create(&agent_labels)
        .observe(duration_seconds.max(0.0));
    if status == AttemptStatus::Quota {
        m.quota_hits.get_or_create(&agent_labels).inc();
    }
    if verification_ms > 0 {
        m.verification_duration
            .observe(verification_ms as f64 / 1000.0);
    }
    let spend = SpendLabels {
        identity: identity.to_string(),
        agent: agent.to_string(),
    };
    if let Some(cost) = cost_usd.filter(|c| c.is_finite() && *c > 0.0) {
        m.cost.get_or_create(&spend).inc_by(cost);
    }
    for (kind, n) in [
        ("input", tokens.input),
        ("output", tokens.output),
        ("cached_input", tokens.cached_input),
    ] {
        if n > 0 {
            m.tokens
                .get_or_create(&TokenLabels {
                    identity: identity.to_string(),
                    agent: agent.to_string(),
                    kind: kind.to_string(),
                })
                .inc_by(n);
        }
    }
}

/// Makes every documented series exist from the start, at zero (issue 29: a fresh daemon
/// exposed 5 of the 12 documented metrics, so `rate()` and alerts saw nothing until the
/// first attempt): attempts by every outcome, durations, quota hits, cost and tokens for
/// each configured agent and identity, containers by result, and GitHub requests. Label
/// values come from configuration only. The GitHub rate-limit gauge stays absent until
/// GitHub answers.
pub fn prime(agents: &[&str], identities: &[&str]) {
    let m = get();
    for &agent in agents {
        let agent_labels = AgentLabels {
            agent: agent.to_string(),
        };
        for status in AttemptStatus::ALL {
            let _ = m.attempts.get_or_create(&AttemptLabels {
                agent: agent.to_string(),
                outcome: status.as_str().to_string(),
            });
        }
        let _ = m.attempt_duration.get_or_create(&agent_labels);
        let _ = m.quota_hits.get_or_create(&agent_labels);
        for &identity in identities {
            let _ = m.cost.get_or_create(&SpendLabels {
                identity: identity.to_string(),
                agent: agent.to_string(),
            });
            for kind in ["input", "output", "cached_input"] {
                let _ = m.tokens.get_or_create(&TokenLabels {
                    identity: identity.to_string(),
                    agent: agent.to_string(),
                    kind: kind.to_string(),
                });
            }
        }
    }
    for result in ["started", "failed"] {
        let _ = m.containers.get_or_create(&ContainerLabels {
            result: result.to_string(),
        });
    }
    let _ = m.github_requests.get_or_create(&GithubLabels {
        method: "GET".to_string(),
        status: "200".to_string(),
    });
}

/// A task was claimed for its first attempt after waiting `waited` in the queue.
pub fn first_claim(waited: Duration) {
    get().queue_wait.observe(waited.as_secs_f64());
}

/// A container was created and started (`true`) or the engine refused it (`false`).
pub fn container(started: bool) {
    let result = if started { "started" } else { "failed" };
    get()
        .containers
        .get_or_create(&ContainerLabels {
            result: result.to_string(),
        })
        .inc();
}

/// `n` connections an attempt's egress proxy allowed or refused (`reason` empty when
/// allowed).
pub fn egress_connections(allowed: bool, reason: &str, n: u64) {
    get()
        .egress_connections
        .get_or_create(&EgressLabels {
            result: if allowed { "allowed" } else { "refused" }.to_string(),
            reason: reason.to_string(),
        })
        .inc_by(n);
}

/// One per-attempt egress network created (or refused by the engine).
pub fn egress_network(created: bool) {
    let result = if created { "started" } else { "failed" };
    get()
        .egress_networks
        .get_or_create(&ContainerLabels {
            result: result.to_string(),
        })
        .inc();
}

/// One GitHub API answer (`status` `None`: no answer), with its remaining rate limit.
pub fn github_request(method: &str, status: Option<u16>, remaining: Option<i64>) {
    let m = get();
    m.github_requests
        .get_or_create(&GithubLabels {
            method: method.to_string(),
            status: status.map_or_else(|| "error".to_string(), |s| s.to_string()),
        })
        .inc();
    if let Some(r) = remaining {
        m.github_rate_limit_remaining
            .get_or_create(&NoLabels::default())
            .set(r);
    }
}

/// One store write transaction took `took`.
pub fn store_write(took: Duration) {
    get().store_write.observe(took.as_secs_f64());
}

/// The exposition text: the queue gauges from `tasks_by_state` (every state listed, zero
/// included), then every metric of this process. The queue gauges belong to this scrape
/// alone (a registry of their own, not the process-wide one), so two scrapes at once, or
/// two callers with different counts, never see each other's values.
pub fn render(tasks_by_state: &BTreeMap<TaskState, u64>) -> String {
    let tasks: Family<StateLabels, Gauge> = Family::default();
    for state in TaskState::ALL {
        let n = tasks_by_state.get(&state).copied().unwrap_or(0);
        tasks
            .get_or_create(&StateLabels {
                state: state.as_str().to_string(),
            })
            .set(n as i64);
    }
    let mut queue = Registry::with_prefix("polyphony");
    queue.register("tasks", "Tasks in the queue by state", tasks);
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode_registry(&mut out, &queue);
    let _ = encode_registry(&mut out, &get().registry);
    let _ = encode_eof(&mut out);
    out
}

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_lists_every_state_and_counts_attempts() {
        attempt_finished(
            "unit-test-agent",
            "unit-id",
            AttemptStatus::Succeeded,
            12.5,
            Some(0.25),
            &crate::domain::TokenUsage {
                input: 10,
                output: 5,
                cached_input: 0,
            },
            1500,
        );
        let text = render(&BTreeMap::from([(TaskState::Landed, 3)]));
        assert!(
            text.contains("polyphony_tasks{state=\"LANDED\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("polyphony_tasks{state=\"BLOCKED\"} 0"),
            "{text}"
        );
        assert!(
            text.contains(
                "polyphony_attempts_total{agent=\"unit-test-agent\",outcome=\"succeeded\"} 1"
            ),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }

    /// Issue 29: after `prime`, every documented metric has a series; the GitHub
    /// rate-limit gauge has none until GitHub answered.
    #[test]
    fn primed_metrics_list_every_documented_series_at_zero() {
        prime(&["prime-agent"], &["prime-id"]);
        let text = render(&BTreeMap::new());
        let docs = include_str!("../docs/metrics.md");
        let documented: Vec<&str> = docs
            .lines()
            .filter_map(|l| l.strip_prefix("| `polyphony_"))
            .filter_map(|l| l.split('`').next())
            .collect();
        assert!(documented.len() >= 12, "{documented:?}");
        for name in documented {
            let name = format!("polyphony_{name}");
            let has_series = text.lines().any(|l| {
                !l.starts_with('#')
                    && (l.starts_with(&format!("{name} "))
                        || l.starts_with(&format!("{name}{{"))
                        || l.starts_with(&format!("{name}_bucket"))
                        || l.starts_with(&format!("{name}_count")))
            });
            if name == "polyphony_github_rate_limit_remaining" {
                continue;
            }
            assert!(has_series, "{name} has no series:\n{text}");
        }
        assert!(
            text.contains("polyphony_attempts_total{agent=\"prime-agent\",outcome=\"quota\"} 0")
        );
    }

    #[test]
    fn the_rate_limit_gauge_is_a_plain_series_once_github_answered() {
        github_request("GET", Some(200), Some(4321));
        let text = render(&BTreeMap::new());
        assert!(
            text.lines()
                .any(|l| l == "polyphony_github_rate_limit_remaining 4321"),
            "{text}"
        );
    }
}
