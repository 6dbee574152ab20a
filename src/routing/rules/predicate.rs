//! One `match:` predicate of a routing rule: compiled from the YAML (values parsed, lists
//! non-empty, globs and ranges checked) and tested against a [`RouteInput`], with what it
//! expected and what the task had for `route --explain`. Pure.

use globset::GlobSet;
use std::fmt;
use std::str::FromStr;

use super::{repo_globset, repo_keys, RouteInput, RoutingError};
use crate::config::model::{MatchConfig, OneOrMany, RangeConfig};
use crate::domain::{Risk, Scope, SourceKind, TaskType};

/// One compiled predicate.
#[derive(Debug, Clone)]
pub(super) enum Predicate {
    TaskType(Vec<TaskType>),
    Risk(Vec<Risk>),
    Scope(Vec<Scope>),
    RequiresWeb(bool),
    /// Lower-cased.
    Labels(Vec<String>),
    Source(Vec<SourceKind>),
    Repo(Vec<String>, GlobSet),
    Complexity(Option<u32>, Option<u32>),
}

impl Predicate {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Predicate::TaskType(_) => "task_type",
            Predicate::Risk(_) => "risk",
            Predicate::Scope(_) => "scope",
            Predicate::RequiresWeb(_) => "requires_web",
            Predicate::Labels(_) => "labels",
            Predicate::Source(_) => "source",
            Predicate::Repo(..) => "repo",
            Predicate::Complexity(..) => "complexity",
        }
    }

    pub(super) fn holds(&self, input: &RouteInput) -> bool {
        match self {
            Predicate::TaskType(v) => v.contains(&input.task_type),
            Predicate::Risk(v) => v.contains(&input.risk),
            Predicate::Scope(v) => v.contains(&input.scope),
            Predicate::RequiresWeb(want) => *want == input.requires_web,
            Predicate::Labels(v) => input
                .labels
                .iter()
                .any(|l| v.contains(&l.trim().to_lowercase())),
            Predicate::Source(v) => v.contains(&input.source),
            Predicate::Repo(_, set) => repo_keys(&input.repo).iter().any(|k| set.is_match(k)),
            Predicate::Complexity(min, max) => {
                min.is_none_or(|m| input.complexity >= m)
                    && max.is_none_or(|m| input.complexity <= m)
            }
        }
    }

    pub(super) fn expected(&self) -> String {
        fn list<T: fmt::Display>(v: &[T]) -> String {
            let items: Vec<String> = v.iter().map(ToString::to_string).collect();
            if items.len() == 1 {
                items[0].clone()
            } else {
                format!("one of [{}]", items.join(", "))
            }
        }
        match self {
            Predicate::TaskType(v) => list(v),
            Predicate::Risk(v) => list(v),
            Predicate::Scope(v) => list(v),
            Predicate::RequiresWeb(b) => b.to_string(),
            Predicate::Labels(v) => format!("any of [{}]", v.join(", ")),
            Predicate::Source(v) => list(v),
            Predicate::Repo(patterns, _) => format!("a match for [{}]", patterns.join(", ")),
            Predicate::Complexity(min, max) => match (min, max) {
                (Some(a), Some(b)) => format!("{a}..={b}"),
                (Some(a), None) => format!(">= {a}"),
                (None, Some(b)) => format!("<= {b}"),
                (None, None) => "any".to_string(),
            },
        }
    }

    pub(super) fn actual(&self, input: &RouteInput) -> String {
        match self {
            Predicate::TaskType(_) => input.task_type.to_string(),
            Predicate::Risk(_) => input.risk.to_string(),
            Predicate::Scope(_) => input.scope.to_string(),
            Predicate::RequiresWeb(_) => input.requires_web.to_string(),
            Predicate::Labels(_) => format!("[{}]", input.labels.join(", ")),
            Predicate::Source(_) => input.source.to_string(),
            Predicate::Repo(..) => input.repo.clone(),
            Predicate::Complexity(..) => input.complexity.to_string(),
        }
    }
}

fn values<'a>(
    rule: &str,
    predicate: &str,
    v: &'a OneOrMany<String>,
) -> Result<&'a [String], RoutingError> {
    let s = v.as_slice();
    if s.is_empty() {
        return Err(RoutingError::EmptyList {
            rule: rule.into(),
            predicate: predicate.into(),
        });
    }
    Ok(s)
}

fn parse_all<T: FromStr<Err = String>>(
    rule: &str,
    predicate: &str,
    v: &OneOrMany<String>,
) -> Result<Vec<T>, RoutingError> {
    values(rule, predicate, v)?
        .iter()
        .map(|s| {
            s.parse::<T>().map_err(|why| RoutingError::BadValue {
                rule: rule.into(),
                predicate: predicate.into(),
                value: s.clone(),
                why,
            })
        })
        .collect()
}

pub(super) fn compile_match(rule: &str, m: &MatchConfig) -> Result<Vec<Predicate>, RoutingError> {
    let mut out = Vec::new();
    if let Some(v) = &m.task_type {
        out.push(Predicate::TaskType(parse_all(rule, "task_type", v)?));
    }
    if let Some(v) = &m.risk {
        out.push(Predicate::Risk(parse_all(rule, "risk", v)?));
    }
    if let Some(v) = &m.scope {
        out.push(Predicate::Scope(parse_all(rule, "scope", v)?));
    }
    if let Some(b) = m.requires_web {
        out.push(Predicate::RequiresWeb(b));
    }
    if let Some(v) = &m.labels {
        let labels = values(rule, "labels", v)?;
        let mut lower = Vec::with_capacity(labels.len());
        for l in labels {
            let l = l.trim().to_lowercase();
            if l.is_empty() {
                return Err(RoutingError::BadValue {
                    rule: rule.into(),
                    predicate: "labels".into(),
                    value: String::new(),
                    why: "a label cannot be empty".into(),
                });
            }
            lower.push(l);
        }
        out.push(Predicate::Labels(lower));
    }
    if let Some(v) = &m.source {
        out.push(Predicate::Source(parse_all(rule, "source", v)?));
    }
    if let Some(v) = &m.repo {
        let patterns = values(rule, "repo", v)?;
        out.push(Predicate::Repo(
            patterns.to_vec(),
            repo_globset(patterns).map_err(|(value, why)| RoutingError::BadValue {
                rule: rule.into(),
                predicate: "repo".into(),
                value,
                why,
            })?,
        ));
    }
    if let Some(RangeConfig { min, max }) = m.complexity {
        let bad = |value: String, why: &str| RoutingError::BadValue {
            rule: rule.into(),
            predicate: "complexity".into(),
            value,
            why: why.into(),
        };
        if let (Some(a), Some(b)) = (min, max) {
            if a > b {
                return Err(bad(
                    format!("{{min: {a}, max: {b}}}"),
                    "min is greater than max",
                ));
            }
        }
        for end in [min, max].into_iter().flatten() {
            if end > 10 {
                return Err(bad(
                    end.to_string(),
                    "the complexity score runs from 0 to 10",
                ));
            }
        }
        out.push(Predicate::Complexity(min, max));
    }
    Ok(out)
}
