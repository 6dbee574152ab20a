//! `egress` settings (issue 25) checked at load: config.yaml's `egress` section and each
//! repository's `egress.allow`, and an agent profile's `egress` resolved into its
//! [`EgressProfile`]. Every error names the field and how to write it.

use std::net::IpAddr;

use super::locate::Seg::{self, Item, Key};
use super::model::{AgentConfig, GlobalConfig};
use super::{values, ConfigError, ConfigErrorKind, Doc};
use crate::domain::{EgressMode, EgressProfile};
use crate::egress::policy::{self, Entry};

fn invalid(doc: &Doc<'_>, path: &[Seg<'_>], what: String, fix: &str) -> ConfigError {
    doc.error(ConfigErrorKind::InvalidValue, path, None, what, fix)
}

fn mode_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    text: &str,
) -> Result<EgressMode, ConfigError> {
    EgressMode::parse(text).ok_or_else(|| {
        invalid(
            doc,
            path,
            format!("`{field}` is `{text}`, not an egress mode"),
            "use allowlist (the default: named hosts only, through a proxy), none (no network) or open (needs allow_unsafe)",
        )
    })
}

fn entries_at(
    doc: &Doc<'_>,
    path: &[Seg<'_>],
    field: &str,
    entries: &[String],
) -> Result<(), ConfigError> {
    for (i, entry) in entries.iter().enumerate() {
        if let Err(e) = Entry::parse(entry) {
            let mut at = path.to_vec();
            at.push(Item(i));
            return Err(invalid(
                doc,
                &at,
                format!("`{field}[{i}]`: {e}"),
                "write host:port entries, like registry.npmjs.org:443 or *.crates.io:443",
            ));
        }
    }
    Ok(())
}

/// config.yaml `egress` and `repos[].egress`.
pub(super) fn check_global(g: &GlobalConfig, doc: &Doc<'_>) -> Result<(), ConfigError> {
    let e = &g.egress;
    mode_at(doc, &[Key("egress"), Key("mode")], "egress.mode", &e.mode)?;
    entries_at(
        doc,
        &[Key("egress"), Key("allow")],
        "egress.allow",
        &e.allow,
    )?;
    for (name, address) in &e.hosts {
        let path = [Key("egress"), Key("hosts"), Key(name.as_str())];
        if policy::normalize(name).is_none() {
            return Err(invalid(
                doc,
                &path,
                format!("`egress.hosts`: `{name}` is not a host name"),
                "map DNS names to addresses, like `model.internal: 10.0.0.5`",
            ));
        }
        if address.trim().parse::<IpAddr>().is_err() {
            return Err(invalid(
                doc,
                &path,
                format!("`egress.hosts.{name}` is `{address}`, not an IP address"),
                "give the address the proxy should connect to for this name, like 10.0.0.5",
            ));
        }
    }
    let outbound = e.outbound_network.trim();
    let named = outbound.strip_prefix("network:");
    let ok = outbound == "bridge"
        || named.is_some_and(|n| {
            !n.is_empty()
                && n.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        });
    if !ok {
        return Err(invalid(doc, &[Key("egress"), Key("outbound_network")], format!("`egress.outbound_network` is `{outbound}`"), "use bridge (Docker's default network) or network:NAME (a Docker network the proxy joins to reach the outside)"));
    }
    if e.max_connections == 0 {
        return Err(invalid(
            doc,
            &[Key("egress"), Key("max_connections")],
            "`egress.max_connections` must be at least 1".into(),
            "set it to the connections one attempt may open (default 10000)",
        ));
    }
    if let Err(err) = values::parse_size(&e.max_bytes) {
        return Err(invalid(
            doc,
            &[Key("egress"), Key("max_bytes")],
            format!("`egress.max_bytes` is not a valid size: {err}"),
            "write a size with a unit, like 4g",
        ));
    }
    for (i, repo) in g.repos.iter().enumerate() {
        if let Some(re) = &repo.egress {
            entries_at(
                doc,
                &[Key("repos"), Item(i), Key("egress"), Key("allow")],
                &format!("repos[{i}].egress.allow"),
                &re.allow,
            )?;
        }
    }
    Ok(())
}

/// The profile's egress: its own mode (or config.yaml's `egress.mode`) and entries. An
/// explicit `network:` is refused unless the mode is `open`: under `allowlist` and `none`
/// the network is Polyphony's to choose.
pub(super) fn profile(
    g: &GlobalConfig,
    a: &AgentConfig,
    i: usize,
    doc: &Doc<'_>,
) -> Result<EgressProfile, ConfigError> {
    let at = |k: &'static str| vec![Key("agents"), Item(i), Key(k)];
    let mode = match a.egress.as_ref().and_then(|e| e.mode()) {
        Some(m) => {
            let mut path = at("egress");
            if matches!(a.egress, Some(super::model::EgressField::Full(_))) {
                path.push(Key("mode"));
            }
            mode_at(doc, &path, "egress", m)?
        }
        None => EgressMode::parse(&g.egress.mode).unwrap_or(EgressMode::Allowlist),
    };
    let allow = a
        .egress
        .as_ref()
        .map(|e| e.allow().to_vec())
        .unwrap_or_default();
    let mut path = at("egress");
    path.push(Key("allow"));
    entries_at(doc, &path, &format!("agents[{i}].egress.allow"), &allow)?;
    if a.network.is_some() && mode != EgressMode::Open {
        return Err(invalid(
            doc,
            &at("network"),
            format!("agent `{}` sets `network` but its egress is `{mode}`: a network applies only under `egress: open`", a.name),
            "remove `network` (allowlist gives the agent its own network and proxy), or set `egress: open` (needs allow_unsafe)",
        ));
    }
    Ok(EgressProfile { mode, allow })
}
