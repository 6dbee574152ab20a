//! The model-API gateway of one attempt (issue 26, src/gateway/); what it metered becomes
//! the attempt's cost, tokens, budget end and usage-limit reset.
//!
//! Where it runs:
//! - **`egress: allowlist`** (the default): inside the attempt's egress proxy container,
//!   on port 3129 of the attempt's internal network ([`Prepared::into_proxy`]). The real
//!   credential reaches the proxy as a 0600 file in a directory of the home mounted
//!   read-only into the proxy only, deleted once the proxy is ready ([`Prepared::ready`]);
//!   the agent's container holds the placeholder. The proxy outlives the daemon, so an
//!   attempt re-attached after a restart keeps its gateway; the daemon reads the request
//!   records from the proxy's log, live and again in full when the attempt ends.
//! - **`open` / `none`**: there is no proxy, so the daemon hosts the gateway on the host
//!   address of the container's network (loopback under `none`). A re-attached attempt of
//!   these modes has no gateway: its CLI's requests fail and it ends as the CLI reports.
//!
//! Budget: the identity's daily remainder when the attempt starts, then (in the proxy)
//! re-read from the budget file the daemon rewrites on every metered request of any of that
//! identity's running attempts ([`LiveSpend`]), so two attempts at once do not both spend
//! the same remainder. Between two rewrites, requests in flight at once can still each pass
//! against the same figure (the estimate is per request).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde_json::json;

use crate::agents::quota::ResetHint;
use crate::agents::QuotaHit;
use crate::config::Config;
use crate::domain::{AttemptStatus, EventKind, EventStream, RunSpec, TaskEvent};
use crate::gateway::pricing::picos_of_usd;
use crate::gateway::{self, CredentialKind, GatewayHandle, GatewaySpec, Hooks, RequestRecord};
use crate::orchestrator::gateway_plan::{self as plan, Kind, Plan};
use crate::runtime::container_spec::ContainerSpec;
use crate::runtime::{EgressPlan, WorkerRuntime};

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

/// Where the attempt's gateway runs.
enum Host {
    /// In the daemon (egress `open` or `none`): stops when dropped.
    Daemon {
        handle: GatewayHandle,
        hooks: Arc<AttemptHooks>,
    },
    /// In the attempt's egress proxy: its base URL once the proxy is up.
    Proxy { base_url: Option<String> },
}

/// A gateway and what the container gets from it.
pub(crate) struct AttemptGateway {
    plan: Plan,
    placeholder: String,
    host: Host,
}

/// What [`prepare`] needs besides the spec.
pub(crate) struct GatewayInputs<'a> {
    pub config: &'a Config,
    pub env: &'a EnvLookup,
    pub clock: &'a Clock,
    /// What is left of the identity's daily ceiling, USD (`None`: no ceiling).
    pub daily_left_usd: Option<f64>,
}

/// An attempt's gateway decided, not yet started: the spec and the secret.
pub(crate) struct Prepared {
    plan: Plan,
    spec: GatewaySpec,
    secret: String,
}

/// Decides whether `spec`'s CLI goes through a gateway (the gateway is on and the CLI's
/// credential can go through it); `None` when the attempt runs as before (said in the log).
pub(crate) fn prepare(spec: &RunSpec, inputs: GatewayInputs<'_>) -> Option<Prepared> {
    if !inputs.config.gateway().enabled {
        return None;
    }
    let plan = match plan::plan(spec.agent_type, &spec.env_overlay, &spec.volume_mounts) {
        Ok(p) => p,
        Err(why) => {
            tracing::warn!(identity = %spec.identity, agent = %spec.agent, "{}", why.explain(spec.agent_type));
            return None;
        }
    };
    let Some(secret) = (inputs.env)(&plan.credential_from_host).filter(|s| !s.is_empty()) else {
        // Nothing to protect: the CLI reports its own authentication failure.
        tracing::warn!(
            identity = %spec.identity,
            "host variable {} (api_keys.{}) is not set: the agent runs without a model credential",
            plan.credential_from_host, plan.credential_var
        );
        return None;
    };
    let upstream = plan
        .upstream_from_host
        .as_deref()
        .and_then(|v| (inputs.env)(v))
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| plan.api.default_upstream().to_string());
    let now = (inputs.clock)();
    let gspec = GatewaySpec {
        api: plan.api,
        upstream,
        kind: match plan.kind {
            Kind::ApiKey => CredentialKind::ApiKey,
            Kind::OAuthToken => CredentialKind::OauthToken,
        },
        placeholder: gateway::new_placeholder(),
        prices: inputs.config.gateway().prices.clone(),
        attempt_budget_usd: Some(inputs.config.max_cost_usd_per_attempt()),
        daily_left_usd: inputs.daily_left_usd.map(|d| d.max(0.0)),
        budget_resets_at: Some(next_day(now)),
        dir: gateway::spec::CONTAINER_DIR.to_string(),
    };
    Some(Prepared {
        plan,
        spec: gspec,
        secret,
    })
}

/// The gateway's private directory for one attempt's proxy: `<home>/run/gateway/<proxy>`.
pub(crate) fn proxy_dir(home: &Path, proxy_name: &str) -> PathBuf {
    home.join("run").join("gateway").join(proxy_name)
}

/// The proxy's `uid:gid` and, for a root daemon, the owner its files are given: the
/// daemon's own user, except that a root daemon runs it as `nobody`.
pub(crate) fn proxy_user() -> (String, Option<u32>) {
    let me = crate::runtime::daemon_user();
    if me.starts_with("0:") {
        ("65534:65534".to_string(), Some(65534))
    } else {
        (me, None)
    }
}

fn write_private(path: &Path, text: &str, owner: Option<u32>) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    if let Some(uid) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
    }
    Ok(())
}

impl Prepared {
    /// Hosts the gateway in the attempt's proxy: writes the credential (0600) and the
    /// first budget file into the proxy's private directory, mounts that directory
    /// read-only into the proxy, and puts the spec (no secret) into its config.
    pub(crate) fn into_proxy(
        self,
        home: &Path,
        egress: &mut EgressPlan,
    ) -> Result<AttemptGateway, String> {
        let dir = proxy_dir(home, &egress.proxy_name);
        let (user, owner) = proxy_user();
        let written = (|| -> std::io::Result<()> {
            // A proxy started early (`egress::early_plan`) mounts this directory already:
            // it is kept (made fresh then), and the file the proxy waits for comes last.
            if egress.config_file.is_none() {
                let _ = std::fs::remove_dir_all(&dir);
            }
            crate::private::create_dir(&dir)?;
            if let Some(uid) = owner {
                std::os::unix::fs::chown(&dir, Some(uid), Some(uid))?;
            }
            write_private(
                &dir.join(gateway::spec::CREDENTIAL_FILE),
                &format!("{}\n", self.secret),
                owner,
            )?;
            let budget = gateway::BudgetFile {
                daily_left_usd: self.spec.daily_left_usd,
            };
            write_private(
                &dir.join(gateway::spec::BUDGET_FILE),
                &serde_json::to_string(&budget).unwrap_or_default(),
                owner,
            )
        })();
        written.map_err(|e| {
            format!(
                "cannot write the model-API gateway's directory {}: {e}",
                dir.display()
            )
        })?;
        let mut config: crate::egress::ProxyConfig = serde_json::from_str(&egress.config_json)
            .map_err(|e| format!("egress proxy config: {e}"))?;
        config.gateway = Some(self.spec.clone());
        egress.config_json =
            serde_json::to_string(&config).map_err(|e| format!("egress proxy config: {e}"))?;
        egress.mounts.push((
            dir.display().to_string(),
            gateway::spec::CONTAINER_DIR.to_string(),
        ));
        egress.user = Some(user);
        Ok(AttemptGateway {
            plan: self.plan,
            placeholder: self.spec.placeholder,
            host: Host::Proxy { base_url: None },
        })
    }

    /// Hosts the gateway in the daemon, on the host address of `network` (loopback when
    /// the container has none).
    pub(crate) async fn in_daemon(
        self,
        runtime: &dyn WorkerRuntime,
        network: &crate::domain::NetworkMode,
        clock: &Clock,
    ) -> Result<AttemptGateway, String> {
        let ip = match runtime.host_address(network).await {
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
        let hooks = Arc::new(AttemptHooks {
            records: Mutex::new(Vec::new()),
            daily_left: self.spec.daily_left_usd.map(picos_of_usd),
            clock: clock.clone(),
        });
        let placeholder = self.spec.placeholder.clone();
        let handle = gateway::start(listener, self.spec.settings(self.secret), hooks.clone())
            .map_err(|e| e.to_string())?;
        Ok(AttemptGateway {
            plan: self.plan,
            placeholder,
            host: Host::Daemon { handle, hooks },
        })
    }
}

/// Deletes the credential file of a proxy that is up (it read it before saying `ready`).
/// A fresh, empty gateway directory for the proxy `proxy_name` started early
/// (`egress::early_plan`), owned by the proxy's user; the directory and that user.
pub(crate) fn fresh_proxy_dir(home: &Path, proxy_name: &str) -> std::io::Result<(PathBuf, String)> {
    let dir = proxy_dir(home, proxy_name);
    let (user, owner) = proxy_user();
    let _ = std::fs::remove_dir_all(&dir);
    crate::private::create_dir(&dir)?;
    if let Some(uid) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(uid))?;
    }
    Ok((dir, user))
}

/// Hands the early proxy its config (`egress::PROXY_CONFIG_FILE`), whole: written aside,
/// then renamed into the name the proxy waits for.
pub(crate) fn write_proxy_config(home: &Path, proxy_name: &str, json: &str) -> std::io::Result<()> {
    let dir = proxy_dir(home, proxy_name);
    let (_, owner) = proxy_user();
    let aside = dir.join(format!(".{}.new", crate::egress::PROXY_CONFIG_FILE));
    write_private(&aside, json, owner)?;
    std::fs::rename(&aside, dir.join(crate::egress::PROXY_CONFIG_FILE))
}

pub(crate) fn forget_credential(home: &Path, proxy_name: &str) {
    let path = proxy_dir(home, proxy_name).join(gateway::spec::CREDENTIAL_FILE);
    if let Err(e) = std::fs::remove_file(&path) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cannot delete the gateway's credential file");
        }
    }
}

/// Removes a proxy's private directory (the attempt is over).
pub(crate) fn remove_proxy_dir(home: &Path, proxy_name: &str) {
    let dir = proxy_dir(home, proxy_name);
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the gateway's directory");
        }
    }
}

/// Sweeps `<home>/run/gateway/` of what attempts left behind (issue 25/26): a daemon
/// killed between writing a proxy's key and the proxy reading it leaves the key on disk.
/// Directories `keep` says are a live attempt's lose only their key (their proxy read it
/// before it said `ready`, and their agent started after that); every other directory
/// goes. Call it only when no attempt of this home is starting (daemon start, `cleanup`
/// with no daemon running). Returns the paths removed.
pub(crate) fn sweep_stale(home: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let root = home.join("run").join("gateway");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let gone = if keep(&name) {
            let key = path.join(gateway::spec::CREDENTIAL_FILE);
            std::fs::remove_file(&key).is_ok().then_some(key)
        } else if path.is_dir() {
            std::fs::remove_dir_all(&path).is_ok().then_some(path)
        } else {
            std::fs::remove_file(&path).is_ok().then_some(path)
        };
        removed.extend(gone);
    }
    removed
}

/// The next UTC midnight after `now`: when a daily budget resets.
pub(crate) fn next_day(now: DateTime<Utc>) -> DateTime<Utc> {
    crate::identity_policy::utc_day_start(now) + chrono::Duration::days(1)
}

impl AttemptGateway {
    /// The proxy hosting the gateway is up at `proxy_ip` on the attempt's network.
    pub(crate) fn proxy_ready(&mut self, proxy_ip: IpAddr) {
        if let Host::Proxy { base_url } = &mut self.host {
            *base_url = Some(format!(
                "http://{}{}",
                std::net::SocketAddr::new(proxy_ip, crate::egress::GATEWAY_PORT),
                self.plan.api.cli_base_suffix()
            ));
        }
    }

    /// The URL the CLI is pointed at.
    pub(crate) fn base_url(&self) -> Option<String> {
        match &self.host {
            Host::Daemon { handle, .. } => Some(handle.base_url()),
            Host::Proxy { base_url } => base_url.clone(),
        }
    }

    /// Whether the gateway lives in the attempt's proxy.
    pub(crate) fn in_proxy(&self) -> bool {
        matches!(self.host, Host::Proxy { .. })
    }

    /// The container as the gateway needs it: the placeholder and the gateway's URL in place
    /// of the real credential, no model credential in the env overlay, no login files.
    /// Codex, which takes no base URL from its environment, gets a model provider pointing
    /// at the gateway in its staged `config.toml` ([`codex_provider`]).
    pub(crate) fn apply(&self, spec: &mut ContainerSpec, scratch: &Path) -> Result<(), String> {
        let staging = crate::identity::staging_path(self.plan.agent);
        let codex_config = format!("{staging}/config.toml");
        let operator_codex = spec
            .mounts
            .iter()
            .find(|m| m.container_path == codex_config)
            .and_then(|m| std::fs::read_to_string(&m.host_path).ok());
        let keep_env: Vec<&str> = self
            .plan
            .env_overlay
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        spec.env_from_host
            .retain(|v| keep_env.contains(&v.name.as_str()));
        let kept: Vec<&str> = self
            .plan
            .volume_mounts
            .iter()
            .map(|m| m.container_path.as_str())
            .collect();
        spec.mounts.retain(|m| {
            !m.container_path.starts_with(&staging) || kept.contains(&m.container_path.as_str())
        });
        spec.env
            .insert(self.plan.credential_var.clone(), self.placeholder.clone());
        let Some(url) = self.base_url() else {
            return Ok(());
        };
        if self.plan.api == gateway::Api::OpenAiResponses {
            crate::private::create_dir(scratch)
                .and_then(|()| {
                    std::fs::write(
                        scratch.join("config.toml"),
                        codex_provider_toml(
                            operator_codex.as_deref(),
                            &url,
                            &self.plan.credential_var,
                        ),
                    )
                })
                .map_err(|e| {
                    format!(
                        "cannot write Codex's gateway config under {}: {e}",
                        scratch.display()
                    )
                })?;
            spec.mounts.retain(|m| m.container_path != codex_config);
            spec.mounts.push(crate::domain::VolumeMount {
                host_path: scratch.join("config.toml"),
                container_path: codex_config,
                read_only: true,
            });
        }
        spec.env.insert(self.plan.base_url_var.to_string(), url);
        Ok(())
    }

    /// The requests an in-daemon gateway recorded (taken); empty for one in the proxy,
    /// whose records come from the proxy's log.
    pub(crate) fn take_records(&self) -> Vec<RequestRecord> {
        match &self.host {
            Host::Daemon { hooks, .. } => {
                std::mem::take(&mut *hooks.records.lock().unwrap_or_else(|p| p.into_inner()))
            }
            Host::Proxy { .. } => Vec::new(),
        }
    }
}

/// Folds what the gateway metered (`records`, in order) into `exec`: the metered cost and
/// tokens replace the CLI's report (kept in a warning for comparison), a budget refusal
/// ends the attempt as `budget`, a limited answer's reset becomes the quota hit's reset.
/// Returns the request events to store after the attempt's own (pure).
pub(crate) fn fold(exec: &mut AttemptExecution, records: Vec<RequestRecord>) -> Vec<TaskEvent> {
    let m = gateway::Meter::of(&records);
    let reported = exec.outcome.cost_usd;
    exec.outcome.cost_usd = Some(m.cost_usd);
    exec.outcome.tokens = m.usage.as_token_usage();
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
                m.unpriced_models
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        reported
            .map(|c| format!("${c:.4}"))
            .unwrap_or_else(|| "no cost".into())
    ));
    if let Some(r) = &m.budget_refusal {
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

/// The provider id the gateway's Codex provider goes under.
pub const CODEX_PROVIDER: &str = "polyphony-gateway";

/// Codex's `config.toml` pointed at the gateway (pure): Codex 0.147.0 takes no base URL
/// from its environment for its built-in provider's key login, so the staged config names a
/// model provider of its own (`model_provider`, `[model_providers.<id>]` with `base_url`,
/// `env_key` and `wire_api = "responses"`: codex-rs `ModelProviderInfo`). The operator's
/// own settings are kept, but for their top-level `model_provider`.
pub fn codex_provider_toml(operator: Option<&str>, base_url: &str, env_key: &str) -> String {
    let mut out = format!("model_provider = \"{CODEX_PROVIDER}\"\n");
    let mut top = true;
    for line in operator.unwrap_or("").lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            top = false;
        }
        if top && t.split('=').next().map(str::trim) == Some("model_provider") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!(
        "\n[model_providers.{CODEX_PROVIDER}]\nname = \"{CODEX_PROVIDER}\"\nbase_url = \"{base_url}\"\nenv_key = \"{env_key}\"\nwire_api = \"responses\"\n"
    ));
    out
}

/// What this daemon's running attempts have metered so far, per identity, and where each
/// one's gateway reads its daily remainder (the budget file in its proxy's directory).
#[derive(Default)]
pub struct LiveSpend {
    attempts: Mutex<std::collections::BTreeMap<(String, u32), Live>>,
}

struct Live {
    identity: String,
    spent: gateway::Picos,
    budget_file: Option<PathBuf>,
}

impl LiveSpend {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<(String, u32), Live>> {
        self.attempts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An attempt starts (or is re-attached); `budget_file`: its gateway's, when in a proxy.
    pub(crate) fn join(
        &self,
        task: &str,
        attempt: u32,
        identity: &str,
        budget_file: Option<PathBuf>,
    ) {
        self.lock().insert(
            (task.to_string(), attempt),
            Live {
                identity: identity.to_string(),
                spent: 0,
                budget_file,
            },
        );
    }

    /// The attempt is over (its cost is the store's from now on).
    pub(crate) fn leave(&self, task: &str, attempt: u32) {
        self.lock().remove(&(task.to_string(), attempt));
    }

    /// What the identity's other running attempts have metered (USD).
    pub(crate) fn others(&self, identity: &str, task: &str, attempt: u32) -> f64 {
        let key = (task.to_string(), attempt);
        gateway::pricing::usd_of_picos(
            self.lock()
                .iter()
                .filter(|(k, l)| l.identity == identity && **k != key)
                .map(|(_, l)| l.spent)
                .sum(),
        )
    }

    /// Sets an attempt's metered total; returns, for each running attempt of the same
    /// identity with a budget file, that file and what the others metered (USD).
    pub(crate) fn set_spent(
        &self,
        task: &str,
        attempt: u32,
        spent: gateway::Picos,
    ) -> Vec<(PathBuf, f64)> {
        let mut all = self.lock();
        let key = (task.to_string(), attempt);
        let Some(identity) = all.get_mut(&key).map(|l| {
            l.spent = spent;
            l.identity.clone()
        }) else {
            return Vec::new();
        };
        let mine: Vec<(&(String, u32), &Live)> =
            all.iter().filter(|(_, l)| l.identity == identity).collect();
        let total: gateway::Picos = mine.iter().map(|(_, l)| l.spent).sum();
        mine.iter()
            .filter_map(|(_, l)| {
                l.budget_file
                    .clone()
                    .map(|f| (f, gateway::pricing::usd_of_picos(total - l.spent)))
            })
            .collect()
    }
}

/// Rewrites a gateway's budget file: `daily_left_usd` for that attempt.
pub(crate) fn write_budget(path: &Path, daily_left_usd: Option<f64>) {
    let text = serde_json::to_string(&gateway::BudgetFile {
        daily_left_usd: daily_left_usd.map(|d| d.max(0.0)),
    })
    .unwrap_or_default();
    // Written aside and renamed, so the proxy never reads half a file.
    let tmp = path.with_extension("tmp");
    let owner = proxy_user().1;
    let done = write_private(&tmp, &text, owner).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = done {
        tracing::warn!(path = %path.display(), error = %e, "cannot update the gateway's budget file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_keeps_live_attempts_directories_without_their_key() {
        let home = tempfile::tempdir().unwrap();
        for name in [
            "polyphony-a-1-0123abcd-egress",
            "polyphony-b-2-0123abcd-egress",
        ] {
            let dir = proxy_dir(home.path(), name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(gateway::spec::CREDENTIAL_FILE), "sk\n").unwrap();
            std::fs::write(dir.join(gateway::spec::BUDGET_FILE), "{}").unwrap();
        }
        let removed = sweep_stale(home.path(), |name| name.starts_with("polyphony-a-1-"));
        assert_eq!(removed.len(), 2, "{removed:?}");
        let live = proxy_dir(home.path(), "polyphony-a-1-0123abcd-egress");
        assert!(!live.join(gateway::spec::CREDENTIAL_FILE).exists());
        assert!(live.join(gateway::spec::BUDGET_FILE).exists());
        assert!(!proxy_dir(home.path(), "polyphony-b-2-0123abcd-egress").exists());
        // Nothing to sweep: no error, nothing removed.
        assert!(sweep_stale(&home.path().join("missing"), |_| false).is_empty());
    }

    #[test]
    fn live_spend_gives_each_attempt_what_the_identitys_others_metered() {
        let live = LiveSpend::default();
        live.join("t1", 1, "work", Some(PathBuf::from("/a")));
        live.join("t2", 1, "work", Some(PathBuf::from("/b")));
        live.join("t3", 1, "other", Some(PathBuf::from("/c")));
        let usd = |x: f64| picos_of_usd(x);
        assert!(live.set_spent("t3", 1, usd(9.0)).len() == 1);
        let files = live.set_spent("t1", 1, usd(2.0));
        assert_eq!(
            files,
            vec![(PathBuf::from("/a"), 0.0), (PathBuf::from("/b"), 2.0)]
        );
        let files = live.set_spent("t2", 1, usd(0.5));
        assert_eq!(
            files,
            vec![(PathBuf::from("/a"), 0.5), (PathBuf::from("/b"), 2.0)]
        );
        assert_eq!(live.others("work", "t1", 1), 0.5);
        live.leave("t2", 1);
        assert_eq!(live.others("work", "t1", 1), 0.0);
        assert!(live.set_spent("gone", 1, 5).is_empty());
    }

    #[test]
    fn a_codex_config_gets_the_gateway_provider_and_keeps_the_operators_settings() {
        let operator = "model = \"gpt-5.5\"\nmodel_provider = \"scripted\"\napproval_policy = \"never\"\n\n[model_providers.scripted]\nname = \"scripted\"\nbase_url = \"http://x/v1\"\n";
        let out = codex_provider_toml(Some(operator), "http://10.0.0.2:3129/v1", "OPENAI_API_KEY");
        assert!(
            out.starts_with("model_provider = \"polyphony-gateway\"\n"),
            "{out}"
        );
        assert_eq!(out.matches("model_provider =").count(), 1, "{out}");
        assert!(out.contains("model = \"gpt-5.5\"\n"));
        assert!(out.contains("approval_policy = \"never\"\n"));
        assert!(out.contains(
            "[model_providers.polyphony-gateway]\nname = \"polyphony-gateway\"\nbase_url = \"http://10.0.0.2:3129/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n"
        ));
        let bare = codex_provider_toml(None, "http://g/v1", "CODEX_API_KEY");
        assert!(bare.contains("env_key = \"CODEX_API_KEY\""));
    }
}
