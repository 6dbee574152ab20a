//! `routing.yaml` checked: every rule names known agents and identities, falls back
//! without repeats, and has predicate values that parse.

use std::collections::HashSet;

use globset::Glob;

use super::locate::Seg;
use super::model::{self, DefaultRuleConfig, RoutingFile, RuleConfig};
use super::profiles::check_identity_ref;
use super::{ConfigError, ConfigErrorKind, Doc};
use crate::domain::{Risk, Scope, SourceKind, TaskType};

pub(super) fn validate_routing(
    routing: &RoutingFile,
    doc: &Doc<'_>,
    agents: &[&str],
    identities: &[&str],
) -> Result<(), ConfigError> {
    use Seg::{Item, Key};
    let mut seen = HashSet::new();
    for (i, rule) in routing.rules.iter().enumerate() {
        let at = |k: &'static str| vec![Key("rules"), Item(i), Key(k)];
        if rule.name.trim().is_empty() {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &at("name"),
                None,
                format!("rule #{} has an empty name", i + 1),
                "give the rule a name; `route --explain` shows it",
            ));
        }
        if !seen.insert(rule.name.as_str()) {
            return Err(doc.error(
                ConfigErrorKind::Duplicate,
                &at("name"),
                None,
                format!("rule `{}` is defined twice", rule.name),
                "rename one of them: rule names must be unique",
            ));
        }
        let who = format!("rule `{}`", rule.name);
        check_target(
            doc,
            &who,
            &rule.agent,
            &rule.fallback,
            rule.identity.as_deref(),
            &[Key("rules"), Item(i)],
            agents,
            identities,
        )?;
        check_predicates(doc, rule, i)?;
    }
    let DefaultRuleConfig {
        agent,
        fallback,
        identity,
    } = &routing.default;
    check_target(
        doc,
        "the default rule",
        agent,
        fallback,
        identity.as_deref(),
        &[Key("default")],
        agents,
        identities,
    )
}

#[allow(clippy::too_many_arguments)]
fn check_target(
    doc: &Doc<'_>,
    who: &str,
    agent: &str,
    fallback: &[String],
    identity: Option<&str>,
    base: &[Seg<'_>],
    agents: &[&str],
    identities: &[&str],
) -> Result<(), ConfigError> {
    let path =
        |k: &'static str| -> Vec<Seg<'_>> { base.iter().copied().chain([Seg::Key(k)]).collect() };
    let unknown = |name: &str, field: &'static str, what: String| {
        let fix = format!(
            "use one of {} (or add it to agents.yaml)",
            agents.join(", ")
        );
        doc.error(
            ConfigErrorKind::UnknownReference,
            &path(field),
            Some(name),
            what,
            fix,
        )
    };
    if !agents.contains(&agent) {
        return Err(unknown(
            agent,
            "agent",
            format!("{who} names unknown agent `{agent}`"),
        ));
    }
    for (j, fb) in fallback.iter().enumerate() {
        if fb.trim().is_empty() {
            let mut p = path("fallback");
            p.push(Seg::Item(j));
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &p,
                None,
                format!("{who} has an empty fallback entry (#{})", j + 1),
                "remove the empty entry or name an agent",
            ));
        }
        if !agents.contains(&fb.as_str()) {
            return Err(unknown(
                fb,
                "fallback",
                format!("{who} falls back to unknown agent `{fb}`"),
            ));
        }
        if fb == agent || fallback[..j].contains(fb) {
            return Err(doc.error(
                ConfigErrorKind::Duplicate,
                &path("fallback"),
                Some(fb),
                format!("{who} lists `{fb}` twice (agent and fallback chain must not repeat)"),
                format!("remove the repeated `{fb}`"),
            ));
        }
    }
    if let Some(id) = identity {
        check_identity_ref(doc, identities, id, &path("identity"), who)?;
    }
    Ok(())
}

fn check_predicates(doc: &Doc<'_>, rule: &RuleConfig, i: usize) -> Result<(), ConfigError> {
    use Seg::{Item, Key};
    let m = &rule.match_;
    let values = |field: &'static str,
                  v: &Option<model::OneOrMany<String>>,
                  parse: &dyn Fn(&str) -> Result<(), String>,
                  fix: &str|
     -> Result<(), ConfigError> {
        for value in v.iter().flat_map(|v| v.as_slice()) {
            if let Err(e) = parse(value) {
                return Err(doc.error(
                    ConfigErrorKind::InvalidValue,
                    &[Key("rules"), Item(i), Key("match"), Key(field)],
                    Some(value),
                    format!("rule `{}`: {e}", rule.name),
                    fix.to_string(),
                ));
            }
        }
        Ok(())
    };
    values(
        "task_type",
        &m.task_type,
        &|s| s.parse::<TaskType>().map(drop),
        "use bugfix, feature, docs, refactor, research, migration or review",
    )?;
    values(
        "risk",
        &m.risk,
        &|s| s.parse::<Risk>().map(drop),
        "use low, medium or high",
    )?;
    values(
        "scope",
        &m.scope,
        &|s| s.parse::<Scope>().map(drop),
        "use small (0-1 files), medium (2-4) or large (5+)",
    )?;
    values(
        "source",
        &m.source,
        &|s| s.parse::<SourceKind>().map(drop),
        "use github or local",
    )?;
    values(
        "repo",
        &m.repo,
        &|s| {
            Glob::new(s)
                .map(drop)
                .map_err(|e| format!("`{s}` is not a valid glob: {e}"))
        },
        "use a glob like acme/* or **/widgets",
    )?;
    values(
        "labels",
        &m.labels,
        &|s| {
            if s.trim().is_empty() {
                Err("empty label".into())
            } else {
                Ok(())
            }
        },
        "remove the empty label",
    )?;
    if let Some(range) = &m.complexity {
        let bad = range.min.is_some_and(|v| v > 10)
            || range.max.is_some_and(|v| v > 10)
            || matches!((range.min, range.max), (Some(a), Some(b)) if a > b);
        if bad {
            return Err(doc.error(
                ConfigErrorKind::InvalidValue,
                &[Key("rules"), Item(i), Key("match"), Key("complexity")],
                None,
                format!(
                    "rule `{}`: complexity range {:?}..{:?} is not within 0..10 with min <= max",
                    rule.name, range.min, range.max
                ),
                "complexity scores run 0-10 (spec §5.1); write e.g. `complexity: {min: 7}`",
            ));
        }
    }
    Ok(())
}
