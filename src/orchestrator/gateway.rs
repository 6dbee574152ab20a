//! The model-API gateway of one attempt (issue 26, src/gateway/): started before the
//! agent's container, stopped with it; what it metered becomes the attempt's cost, tokens,
//! budget end and usage-limit reset.
//!
//! Until the per-attempt egress proxy (issue 25) hosts it, the gateway runs in the daemon's
//! process and listens on the host address of the container's network (a bridge network's
//! gateway address, see `WorkerRuntime::host_address`); with `network: none` it listens on
//! loopback, where the container cannot reach it, and the real key still stays out. An
//! attempt re-attached after a daemon restart has no gateway: its CLI's requests fail, and
//! it ends as the CLI reports that.
//!
//! The budget it enforces is fixed when it starts: what is left of the identity's daily
//! ceiling (today's metered spend of finished attempts subtracted) and the attempt's
//! `max_cost_usd_per_attempt`; attempts of one identity running at once each see the same
//! daily remainder.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::agents::quota::ResetHint;
use crate::agents::QuotaHit;
use crate::config::Config;
use crate::domain::{AttemptStatus, EventKind, EventStream, RunSpec, TaskEvent, TokenUsage};
use crate::gateway::pricing::picos_of_usd;
use crate::gateway::{self, Credential, GatewayHandle, GatewaySettings, Hooks, RequestRecord};
use crate::orchestrator::gateway_plan::{self as plan, Kind, Plan};
use crate::runtime::container_spec::ContainerSpec;
use crate::runtime::WorkerRuntime;

use super::execute::AttemptExecution;
use super::{Clock, EnvLookup};

/// Collects the request events and answers the budget.
struct AttemptHooks {
    records: Mutex<Vec<RequestRecord>>,
    daily_left: Option<u128>,
    clock: Clock,
}

impl Hooks for AttemptHooks {
    fn daily_left(&self) -> Option<u128> {
        self.daily_left
    }
    fn on_request(&self, record: &RequestRecord) {
        tracing::info!(target: "polyphony::gateway", "{}", record.summary());
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(record.clone());
    }
    fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }
}

/// A running gateway and what the container gets from it.
pub(crate) struct AttemptGateway {
    handle: GatewayHandle,
    plan: Plan,
    hooks: Arc<AttemptHooks>,
}

/// What [`start`] needs besides the spec.
pub(crate) struct GatewayInputs<'a> {
    pub config: &'a Config,
    pub runtime: &'a dyn WorkerRuntime,
    pub env: &'a EnvLookup,
    pub clock: &'a Clock,
    /// What is left of the identity's daily ceiling, USD (`None`: no ceiling).
    pub daily_left_usd: Option<f64>,
}

/// Starts the gateway for `spec` when the gateway is on and the CLI's credential can go
/// through it; `Ok(None)` when the attempt runs as before (said in the log).
pub(crate) async fn start(
    spec: &RunSpec,
    inputs: GatewayInputs<'_>,
) -> Result<Option<AttemptGateway>, String> {
    if !inputs.config.gateway().enabled {
        return Ok(None);
    }
    let plan = match plan::plan(spec.agent_type, &spec.env_overlay, &spec.volume_mounts) {
        Ok(p) => p,
        Err(why) => {
            tracing::warn!(identity = %spec.identity, agent = %spec.agent, "{}", why.explain(spec.agent_type));
            return Ok(None);
        }
    };
    let Some(secret) = (inputs.env)(&plan.credential_from_host).filter(|s| !s.is_empty()) else {
        // Nothing to protect: the CLI reports its own authentication failure.
        tracing::warn!(
            identity = %spec.identity,
            "host variable {} (api_keys.{}) is not set: the agent runs without a model credential",
            plan.credential_from_host, plan.credential_var
        );
        return Ok(None);
    };
    let credential = match plan.kind {
        Kind::ApiKey => Credential::ApiKey(secret),
        Kind::OAuthToken => Credential::OAuthToken(secret),
    };
    let upstream = plan
        .upstream_from_host
        .as_deref()
        .and_then(|v| (inputs.env)(v))
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| plan.api.default_upstream().to_string());
    let ip = match inputs.runtime.host_address(&spec.network).await {
        Ok(Some(ip)) => ip,
        Ok(None) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Err(e) => {
            return Err(format!(
                "cannot find the container network's host address for the model-API gateway: {e}"
            ))
        }
    };
    let listener = tokio::net::TcpListener::bind((ip, 0))
        .await
        .map_err(|e| format!("cannot listen for the model-API gateway on {ip}: {e}"))?;
    let now = (inputs.clock)();
    let hooks = Arc::new(AttemptHooks {
        records: Mutex::new(Vec::new()),
        daily_left: inputs.daily_left_usd.map(|d| picos_of_usd(d.max(0.0))),
        clock: inputs.clock.clone(),
    });
    let handle = gateway::start(
        listener,
        GatewaySettings {
            api: plan.api,
            upstream,
            credential,
            placeholder: gateway::new_placeholder(),
            prices: inputs.config.prices(),
            attempt_budget: Some(picos_of_usd(inputs.config.max_cost_usd_per_attempt())),
            budget_resets_at: Some(next_day(now)),
        },
        hooks.clone(),
    )
    .map_err(|e| e.to_string())?;
    tracing::info!(
        identity = %spec.identity, agent = %spec.agent,
        "model-API gateway for attempt {} on {} ({} through it; the container holds a placeholder)",
        spec.attempt, handle.addr(), plan.credential_var
    );
    Ok(Some(AttemptGateway {
        handle,
        plan,
        hooks,
    }))
}

/// The next UTC midnight after `now`: when a daily budget resets.
pub(crate) fn next_day(now: DateTime<Utc>) -> DateTime<Utc> {
    crate::identity_policy::utc_day_start(now) + chrono::Duration::days(1)
}

impl AttemptGateway {
    /// The container as the gateway needs it: the placeholder and the gateway's URL in place
    /// of the real credential, no model credential in the env overlay, no login files.
    pub(crate) fn apply(&self, spec: &mut ContainerSpec) {
        let keep_env: Vec<&str> = self
            .plan
            .env_overlay
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        spec.env_from_host
            .retain(|v| keep_env.contains(&v.name.as_str()));
        let staging = crate::identity::staging_path(self.plan.agent);
        let kept: Vec<&str> = self
            .plan
            .volume_mounts
            .iter()
            .map(|m| m.container_path.as_str())
            .collect();
        spec.mounts.retain(|m| {
            !m.container_path.starts_with(&staging) || kept.contains(&m.container_path.as_str())
        });
        spec.env.insert(
            self.plan.credential_var.clone(),
            self.handle.placeholder().to_string(),
        );
        spec.env
            .insert(self.plan.base_url_var.to_string(), self.handle.base_url());
    }

    /// Folds what the gateway metered into `exec`: the metered cost and tokens replace the
    /// CLI's report (kept in a warning for comparison), a budget refusal ends the attempt as
    /// `budget`, a limited answer's reset becomes the quota hit's reset. Returns the request
    /// events to store after the attempt's own.
    pub(crate) fn fold(&self, exec: &mut AttemptExecution) -> Vec<TaskEvent> {
        let m = self.handle.meter();
        let reported = exec.outcome.cost_usd;
        exec.outcome.cost_usd = Some(m.cost_usd);
        exec.outcome.tokens = TokenUsage {
            input: m.usage.input_tokens + m.usage.cache_write_tokens,
            output: m.usage.output_tokens,
            cached_input: m.usage.cache_read_tokens,
        };
        exec.warnings
            .retain(|w| !w.starts_with("the reported cost "));
        exec.warnings.push(format!(
            "cost metered at the model-API gateway: ${:.4} over {} request(s){}; the CLI reported {}",
            m.cost_usd,
            m.requests,
            if m.unpriced_models.is_empty() {
                String::new()
            } else {
                format!(
                    " (price unknown for {}: tokens counted, not dollars; add it under gateway.prices)",
                    m.unpriced_models.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            },
            reported
                .map(|c| format!("${c:.4}"))
                .unwrap_or_else(|| "no cost".into())
        ));
        if let Some(r) = m.budget_refusal {
            exec.status = AttemptStatus::Budget;
            exec.reason = Some(format!(
                "the model-API gateway refused a request: it may cost up to ${:.4} and the {} budget has ${:.4} left",
                r.needed_usd,
                if r.limit == "daily" { "identity's daily" } else { "attempt's" },
                r.remaining_usd
            ));
        } else if let Some(at) = m.limit_reset {
            if exec.status != AttemptStatus::Succeeded {
                exec.status = AttemptStatus::Quota;
                let hit = exec.outcome.quota.take().unwrap_or(QuotaHit {
                    message: "the model API answered a usage limit".into(),
                    resets_at: None,
                    reset: None,
                });
                exec.outcome.quota = Some(QuotaHit {
                    resets_at: Some(at.timestamp().to_string()),
                    reset: Some(ResetHint::Epoch {
                        seconds: at.timestamp(),
                    }),
                    ..hit
                });
            }
        }
        let records =
            std::mem::take(&mut *self.hooks.records.lock().unwrap_or_else(|p| p.into_inner()));
        records
            .into_iter()
            .enumerate()
            .map(|(i, r)| TaskEvent {
                seq: exec.next_seq + i as u64,
                kind: EventKind::Usage,
                stream: EventStream::Stderr,
                summary: r.summary(),
                data: json!({ "gateway": r }),
                at: r.at,
            })
            .collect()
    }
}
