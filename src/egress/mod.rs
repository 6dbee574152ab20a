//! Egress by construction (issue 25): each attempt's agent sits on an internal Docker
//! network of its own whose one exit is this attempt's proxy, which reaches only the
//! `host:port` names on the attempt's allowlist.
//!
//! - [`policy`] (pure): the allow/refuse decision on a name and on a resolved address.
//! - [`proxy`] (IO): the `polyphony egress-proxy` server run in the proxy container.
//! - `runtime::proxy_image` (IO): the proxy's offline image, made of this very binary.
//! - this module (pure): an attempt's [`EgressPlan`] (names, labels, proxy config), the
//!   agent's proxy variables, and the [`EgressReport`] read back from the proxy's log.
//!
//! The runtime creates and removes the network and the proxy (`WorkerRuntime::egress_up`,
//! `egress_down`); the orchestrator calls them around the agent's container.

pub mod policy;
pub mod proxy;

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

pub use proxy::{EventLog, ProxyConfig, GATEWAY_PORT, PROXY_PORT};

use crate::domain::{EgressMode, NetworkMode, RunSpec};
use crate::runtime::container_spec::{container_name, ContainerSpec, Role};
use crate::runtime::{EgressPlan, LABEL_ATTEMPT, LABEL_HOME, LABEL_ROLE, LABEL_TASK};

/// `polyphony-<key>-<attempt>-<home>-net` and `…-egress`: one home's attempt, never
/// another home's (the home label is in the name).
pub fn names(task_id: &str, attempt: u32, home_label: &str) -> (String, String) {
    let base = container_name(task_id, attempt, None);
    let home = &home_label[..home_label.len().min(8)];
    (
        format!("{base}-{home}-net"),
        format!("{base}-{home}-egress"),
    )
}

/// The labels of an attempt's network and proxy: home, task, attempt and role `egress`.
pub fn labels(task_id: &str, attempt: u32, home_label: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_TASK.to_string(), task_id.to_string()),
        (LABEL_ATTEMPT.to_string(), attempt.to_string()),
        (LABEL_HOME.to_string(), home_label.to_string()),
        (LABEL_ROLE.to_string(), Role::Egress.as_str().to_string()),
    ])
}

/// The proxy's config file in its gateway directory (`gateway::spec::CONTAINER_DIR`) when
/// it starts before the attempt's allowlist is known ([`early_plan`]).
pub const PROXY_CONFIG_FILE: &str = "proxy.json";

/// [`PROXY_CONFIG_FILE`] as the proxy sees it.
pub fn proxy_config_path() -> String {
    format!(
        "{}/{PROXY_CONFIG_FILE}",
        crate::gateway::spec::CONTAINER_DIR
    )
}

/// `name:address` lines for the proxy's `/etc/hosts`: config.yaml's pins.
fn resolver_hosts(pins: &BTreeMap<String, IpAddr>) -> Vec<String> {
    pins.iter()
        .map(|(name, ip)| format!("{name}:{ip}"))
        .collect()
}

fn parse_pins(pins: &BTreeMap<String, String>) -> BTreeMap<String, IpAddr> {
    // Checked at config load; an address that does not parse is left out.
    pins.iter()
        .filter_map(|(name, ip)| Some((name.clone(), ip.trim().parse::<IpAddr>().ok()?)))
        .collect()
}

/// An attempt's network and proxy made before the attempt is routed (beside the
/// workspace's clone): everything but the allowlist, which the proxy reads from
/// [`PROXY_CONFIG_FILE`] in `dir` (mounted at `gateway::spec::CONTAINER_DIR`) once the
/// daemon writes it. `outbound` and `pins` are config.yaml's, as every attempt's are.
pub fn early_plan(
    task_id: &str,
    attempt: u32,
    home_label: &str,
    outbound: &str,
    pins: &BTreeMap<String, String>,
    dir: &std::path::Path,
    user: String,
) -> EgressPlan {
    let (network, proxy_name) = names(task_id, attempt, home_label);
    let outbound = outbound.trim();
    let outbound = outbound.strip_prefix("network:").unwrap_or(outbound);
    let container_dir = crate::gateway::spec::CONTAINER_DIR;
    EgressPlan {
        network,
        outbound: outbound.to_string(),
        proxy_name,
        labels: labels(task_id, attempt, home_label),
        config_json: String::new(),
        resolver_hosts: resolver_hosts(&parse_pins(pins)),
        mounts: vec![(dir.display().to_string(), container_dir.to_string())],
        user: Some(user),
        config_file: Some(proxy_config_path()),
    }
}

/// The attempt's network and proxy when its egress is `allowlist`; `None` otherwise.
pub fn plan(run: &RunSpec, home_label: &str) -> Option<EgressPlan> {
    if run.egress.mode != EgressMode::Allowlist {
        return None;
    }
    let (network, proxy_name) = names(&run.task_id, run.attempt, home_label);
    let labels = labels(&run.task_id, run.attempt, home_label);
    let config = ProxyConfig {
        allow: run.egress.allow.clone(),
        pins: parse_pins(&run.egress.pins),
        max_connections: run.egress.max_connections,
        max_bytes: run.egress.max_bytes,
        ..ProxyConfig::default()
    };
    Some(EgressPlan {
        network,
        outbound: run.egress.outbound_network.clone(),
        proxy_name,
        labels,
        config_json: serde_json::to_string(&config).unwrap_or_default(),
        // The pins again, for the gateway's own resolver (the proxy checks pins first).
        resolver_hosts: resolver_hosts(&config.pins),
        mounts: Vec::new(),
        user: None,
        config_file: None,
    })
}

/// The agent container's network for its egress mode: the attempt's internal network
/// (allowlist), none, or the profile's own (open).
pub fn agent_network(run: &RunSpec, plan: Option<&EgressPlan>) -> NetworkMode {
    match (run.egress.mode, plan) {
        (EgressMode::Allowlist, Some(plan)) => NetworkMode::Named(plan.network.clone()),
        (EgressMode::Allowlist | EgressMode::None, _) => NetworkMode::None,
        (EgressMode::Open, _) => run.network.clone(),
    }
}

/// The one upstream resolver an agent confined to its attempt's network is given (the
/// container's `--dns`): its own loopback, inside its own network namespace.
///
/// Every container on a user-defined network resolves through the engine's embedded DNS
/// (127.0.0.11), which forwards names it does not know to upstream resolvers. Without a
/// `--dns` those are the host's, and engines before 23.0.11/25.0.5/26 forward to a host
/// resolver on a loopback address *from the host's namespace* even for a container on an
/// `--internal` network (CVE-2024-29018): a DNS tunnel out of a network with no route.
/// Servers named by `--dns` are always dialled from the container's own namespace (moby
/// `setExternalResolvers(.., checkLoopback=false)` on 20.10, `NSOverride` on 26+), so with
/// this one a forwarded query goes to the agent's own loopback and nowhere else, on every
/// engine. The embedded DNS still answers the names of containers on the attempt's network
/// (its proxy's), which is all an agent could learn from it.
pub const AGENT_DNS: &str = "127.0.0.1";

/// Confines an agent's container to the attempt's internal network (its only one), with
/// [`AGENT_DNS`] as its resolver's only upstream and the proxy variables naming the
/// attempt's proxy at `proxy_ip`.
pub fn confine(container: ContainerSpec, plan: &EgressPlan, proxy_ip: IpAddr) -> ContainerSpec {
    let mut container = container.network(NetworkMode::Named(plan.network.clone()));
    container.dns = vec![AGENT_DNS.to_string()];
    for (name, value) in agent_env(proxy_ip) {
        container = container.env(name, value);
    }
    container
}

/// The proxy variables an agent gets (both spellings: tools read one or the other).
/// `NO_PROXY` keeps loopback and the proxy's own address direct (a gateway there).
pub fn agent_env(proxy_ip: IpAddr) -> Vec<(String, String)> {
    let url = format!("http://{proxy_ip}:{PROXY_PORT}");
    let no_proxy = format!("localhost,127.0.0.1,::1,{proxy_ip}");
    let mut out = Vec::new();
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
        out.push((name.to_string(), url.clone()));
    }
    out.push(("NO_PROXY".to_string(), no_proxy.clone()));
    out.push(("no_proxy".to_string(), no_proxy));
    out
}

/// Connections to one `host:port` an attempt made, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllowedHost {
    pub host: String,
    pub port: u16,
    pub connections: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// One refused request, as the proxy logged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub host: String,
    pub port: u16,
    /// The refusal code (`policy::Refusal::as_str`).
    pub reason: String,
    pub detail: String,
}

impl Refused {
    /// `host:port`, or the reason of a refusal without a host (a malformed request).
    pub fn target(&self) -> String {
        if self.host.is_empty() {
            self.reason.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// How many of an attempt's refusals are kept (and stored) one by one, in the order the
/// proxy logged them; later ones are only counted, by reason and by target (a hostile
/// agent can make refused requests without end: the store and the daemon's memory hold a
/// bounded amount of them, `/metrics` and the summary count every one).
pub const KEPT_REFUSALS: usize = 200;
/// How many distinct refused targets the report counts by name; refusals of further
/// targets are counted together ([`EgressReport::refused_elsewhere`]).
pub const KEPT_TARGETS: usize = 50;

/// What an attempt's proxy log says: allowed hosts summed, refusals in order (the first
/// [`KEPT_REFUSALS`]; every one counted), and the model-API gateway's request records
/// (issue 26), when it hosted one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EgressReport {
    pub allowed: Vec<AllowedHost>,
    /// The first [`KEPT_REFUSALS`] refusals, in order.
    pub refused: Vec<Refused>,
    /// Every refusal logged, those in `refused` included.
    #[serde(default)]
    pub refused_total: u64,
    /// Every refusal by its reason code.
    #[serde(default)]
    pub refused_reasons: BTreeMap<String, u64>,
    /// Every refusal by target (`host:port`, or the reason of one without a host), in the
    /// order first refused, for the first [`KEPT_TARGETS`] targets.
    #[serde(default)]
    pub refused_targets: Vec<(String, u64)>,
    /// Refusals of targets past the first [`KEPT_TARGETS`].
    #[serde(default)]
    pub refused_elsewhere: u64,
    /// The proxy said it serves a gateway (`ready` with `gateway: true`).
    #[serde(skip)]
    pub gateway_on: bool,
    /// The `gateway` lines' records, in order.
    #[serde(skip)]
    pub gateway: Vec<crate::gateway::RequestRecord>,
}

/// A log line as [`LogLine::parse_numbered`] reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Numbered {
    /// The proxy's number of the line (`n`), when it says.
    pub n: Option<u64>,
    /// When the proxy wrote it (`ts`), when it says.
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    /// The event, when the line is one the daemon reads.
    pub line: Option<LogLine>,
}

/// One line of the proxy's structured log (`proxy::EventLog`), parsed (pure).
#[derive(Debug, Clone, PartialEq)]
pub enum LogLine {
    /// A connection allowed (its bytes come with its `Closed`).
    Allowed { host: String, port: u16 },
    /// An allowed connection ended, with the bytes it carried.
    Closed {
        host: String,
        port: u16,
        bytes_up: u64,
        bytes_down: u64,
    },
    /// A request refused.
    Refused(Refused),
    /// The proxy listens; `gateway`: it serves the model-API gateway too (issue 26).
    Ready { gateway: bool },
    /// A request record of the model-API gateway.
    Gateway(Box<crate::gateway::RequestRecord>),
    /// The proxy's last line: it was asked to stop (SIGTERM) and exits now, so its log
    /// holds everything it will ever say.
    End,
}

impl LogLine {
    /// One line (without its newline): `None` for a line that is not one of the proxy's
    /// events (not JSON, or an event the daemon does not read).
    pub fn parse(line: &[u8]) -> Option<LogLine> {
        LogLine::from_value(serde_json::from_slice::<serde_json::Value>(line).ok()?)
    }

    fn from_value(value: serde_json::Value) -> Option<LogLine> {
        let text = |k: &str| {
            value
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        let num = |k: &str| value.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
        let (host, port) = (text("host"), num("port") as u16);
        Some(match value.get("event").and_then(|e| e.as_str())? {
            "allowed" => LogLine::Allowed { host, port },
            "closed" => LogLine::Closed {
                host,
                port,
                bytes_up: num("bytes_up"),
                bytes_down: num("bytes_down"),
            },
            "refused" => LogLine::Refused(Refused {
                host,
                port,
                reason: text("reason"),
                detail: text("detail"),
            }),
            "ready" => LogLine::Ready {
                gateway: value.get("gateway").and_then(|g| g.as_bool()) == Some(true),
            },
            "gateway" => LogLine::Gateway(Box::new(
                serde_json::from_value(value.get("record")?.clone()).ok()?,
            )),
            "end" => LogLine::End,
            _ => return None,
        })
    }

    /// When the proxy wrote the line (its `ts`), if it says.
    pub fn time_of(line: &[u8]) -> Option<chrono::DateTime<chrono::Utc>> {
        let value = serde_json::from_slice::<serde_json::Value>(line).ok()?;
        value.get("ts")?.as_str()?.parse().ok()
    }

    /// One line with what the proxy says of it: the event, when it wrote it (`ts`) and
    /// the line's number in its whole log (`n`; a proxy before it said none).
    pub fn parse_numbered(line: &[u8]) -> Numbered {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
            return Numbered::default();
        };
        Numbered {
            n: value.get("n").and_then(|n| n.as_u64()),
            at: value
                .get("ts")
                .and_then(|t| t.as_str())
                .and_then(|t| t.parse().ok()),
            line: LogLine::from_value(value),
        }
    }
}

impl EgressReport {
    /// Reads the proxy's stdout (pure): one JSON object per line; other lines are skipped.
    pub fn from_log(log: &[u8]) -> EgressReport {
        let mut report = EgressReport::default();
        for line in log.split(|b| *b == b'\n') {
            if let Some(line) = LogLine::parse(line) {
                report.add(line);
            }
        }
        report
    }

    /// Adds one line of the log (pure): [`EgressReport::from_log`] line by line, for a
    /// reader following the log as the proxy writes it.
    pub fn add(&mut self, line: LogLine) {
        match line {
            LogLine::Allowed { host, port } => self.entry(host, port).connections += 1,
            LogLine::Closed {
                host,
                port,
                bytes_up,
                bytes_down,
            } => {
                let e = self.entry(host, port);
                e.bytes_up += bytes_up;
                e.bytes_down += bytes_down;
            }
            LogLine::Refused(r) => self.refuse(r),
            LogLine::Ready { gateway } => self.gateway_on = gateway,
            LogLine::Gateway(record) => self.gateway.push(*record),
            LogLine::End => {}
        }
    }

    /// Counts a refusal; keeps it while fewer than [`KEPT_REFUSALS`] are.
    fn refuse(&mut self, r: Refused) {
        self.refused_total += 1;
        *self.refused_reasons.entry(r.reason.clone()).or_default() += 1;
        let target = r.target();
        let kept = self.refused_targets.len();
        match self.refused_targets.iter_mut().find(|(t, _)| *t == target) {
            Some((_, n)) => *n += 1,
            None if kept < KEPT_TARGETS => self.refused_targets.push((target, 1)),
            None => self.refused_elsewhere += 1,
        }
        if self.refused.len() < KEPT_REFUSALS {
            self.refused.push(r);
        }
    }

    /// Whether the last refusal added was kept one by one (within [`KEPT_REFUSALS`]).
    pub fn last_refusal_kept(&self) -> bool {
        self.refused_total <= KEPT_REFUSALS as u64
    }

    /// Connections allowed in all.
    pub fn allowed_total(&self) -> u64 {
        self.allowed.iter().map(|a| a.connections).sum()
    }

    fn entry(&mut self, host: String, port: u16) -> &mut AllowedHost {
        match self
            .allowed
            .iter()
            .position(|a| a.host == host && a.port == port)
        {
            Some(i) => &mut self.allowed[i],
            None => {
                self.allowed.push(AllowedHost {
                    host,
                    port,
                    ..AllowedHost::default()
                });
                self.allowed.last_mut().expect("just pushed")
            }
        }
    }

    /// The one-line summary `status TASK` shows: `egress: api.anthropic.com:443 ×3
    /// (12.0 KiB); refused 1: evil.example:443`.
    pub fn summary(&self) -> String {
        let allowed: Vec<String> = self
            .allowed
            .iter()
            .map(|a| {
                format!(
                    "{}:{} ×{} ({} up, {} down)",
                    a.host,
                    a.port,
                    a.connections,
                    bytes(a.bytes_up),
                    bytes(a.bytes_down)
                )
            })
            .collect();
        let mut out = if allowed.is_empty() {
            "no connections".to_string()
        } else {
            allowed.join(", ")
        };
        if self.refused_total > 0 {
            let targets: Vec<&str> = self
                .refused_targets
                .iter()
                .map(|(t, _)| t.as_str())
                .collect();
            out.push_str(&format!(
                "; refused {}: {}",
                self.refused_total,
                targets.join(", ")
            ));
            if self.refused_elsewhere > 0 {
                out.push_str(&format!(
                    " and {} refusal(s) of other targets",
                    self.refused_elsewhere
                ));
            }
            if self.refused_total > self.refused.len() as u64 {
                out.push_str(&format!(
                    " (the first {} stored one by one, the rest counted)",
                    self.refused.len()
                ));
            }
        }
        out
    }
}

fn bytes(n: u64) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_sums_allowed_hosts_and_keeps_refusals_in_order() {
        let log = br#"{"event":"ready","listen":"0.0.0.0:3128","gateway":true}
{"event":"allowed","host":"api.anthropic.com","port":443,"addr":"1.2.3.4:443"}
{"event":"closed","host":"api.anthropic.com","port":443,"bytes_up":100,"bytes_down":2048}
{"event":"allowed","host":"api.anthropic.com","port":443,"addr":"1.2.3.4:443"}
{"event":"closed","host":"api.anthropic.com","port":443,"bytes_up":50,"bytes_down":0}
{"event":"refused","host":"evil.example","port":443,"reason":"not_allowed","detail":""}
not json at all
{"event":"gateway","record":{"seq":0,"at":"2026-12-01T12:00:00Z","api":"anthropic","method":"POST","path":"/v1/messages","model":"claude-x","status":200,"usage":{"input_tokens":3,"cache_write_tokens":0,"cache_read_tokens":0,"output_tokens":2},"cost_usd":0.5,"cost_picos":"500000000000","price_known":true,"duration_ms":1.0,"outcome":"ok","reset_at":null}}
{"event":"refused","host":"10.0.0.1","port":80,"reason":"ip_literal","detail":""}
"#;
        let r = EgressReport::from_log(log);
        assert_eq!(
            r.allowed,
            vec![AllowedHost {
                host: "api.anthropic.com".into(),
                port: 443,
                connections: 2,
                bytes_up: 150,
                bytes_down: 2048
            }]
        );
        assert_eq!(r.refused.len(), 2);
        assert_eq!(r.refused[0].host, "evil.example");
        assert_eq!(r.gateway.len(), 1);
        assert!(r.gateway_on);
        assert_eq!(r.gateway[0].cost_picos, Some(500_000_000_000));
        assert_eq!(
            r.summary(),
            "api.anthropic.com:443 ×2 (150 B up, 2.0 KiB down); refused 2: evil.example:443, 10.0.0.1:80"
        );
        assert_eq!(EgressReport::from_log(b"").summary(), "no connections");
    }

    #[test]
    fn names_carry_the_home_and_proxy_variables_both_spellings() {
        let (net, proxy) = names("local-3", 2, "0123456789abcdef");
        assert_eq!(net, "polyphony-local-3-2-01234567-net");
        assert_eq!(proxy, "polyphony-local-3-2-01234567-egress");
        let env = agent_env("172.30.0.2".parse().unwrap());
        assert!(env.contains(&("HTTPS_PROXY".into(), "http://172.30.0.2:3128".into())));
        assert!(env.contains(&("http_proxy".into(), "http://172.30.0.2:3128".into())));
        assert!(env.contains(&(
            "NO_PROXY".into(),
            "localhost,127.0.0.1,::1,172.30.0.2".into()
        )));
    }

    #[test]
    fn a_confined_agent_is_on_its_network_only_with_its_own_loopback_as_resolver() {
        let (network, proxy_name) = names("local-3", 2, "0123456789abcdef");
        let plan = EgressPlan {
            network,
            outbound: "bridge".into(),
            proxy_name,
            labels: labels("local-3", 2, "0123456789abcdef"),
            config_json: String::new(),
            resolver_hosts: Vec::new(),
            mounts: Vec::new(),
            user: None,
            config_file: None,
        };
        let spec = ContainerSpec::new("agent", "img", vec![]);
        assert!(spec.dns.is_empty());
        let spec = confine(spec, &plan, "172.30.0.2".parse().unwrap());
        assert_eq!(spec.network, NetworkMode::Named(plan.network.clone()));
        assert_eq!(spec.dns, vec!["127.0.0.1".to_string()]);
        assert_eq!(spec.env["HTTPS_PROXY"], "http://172.30.0.2:3128");
    }
}
