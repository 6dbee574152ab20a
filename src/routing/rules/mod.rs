//! Rule evaluation (spec §5.2–5.6): `routing.yaml` compiled into a [`Router`].
//!
//! Rules are evaluated top-down and the first rule whose predicates all hold wins; the
//! `default` rule applies when none does. Every predicate accepts one value or a list
//! (membership); `labels` holds when the task carries at least one listed label
//! (case-insensitive); `repo` is a case-insensitive glob over the task's repository string
//! and, for GitHub URLs, its `owner/name` form (`*` crosses `/`); `complexity` is an
//! inclusive `{min, max}` range over the total score.
//!
//! Compilation validates what the YAML schema cannot: unknown agents, unknown predicate
//! values, empty names, empty lists, bad globs and ranges, duplicate rule names. Config
//! loading reports the same problems with file:line; these errors, naming the rule, are the
//! programmatic fallback. This module is pure.
//!
//! - `predicate`: one `match:` predicate, compiled and tested against a [`RouteInput`].
//! - `repo_glob`: repository globs and the keys a repository string is matched as.

mod predicate;
mod repo_glob;

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

use crate::config::model::RoutingFile;
use crate::domain::{Risk, Scope, SourceKind, TaskType};
use predicate::{compile_match, Predicate};
pub use repo_glob::{repo_globset, repo_keys, repo_matches};

/// The name a decision carries when no rule matched.
pub const DEFAULT_RULE: &str = "default";

/// What routing looks at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteInput {
    pub task_type: TaskType,
    pub risk: Risk,
    pub scope: Scope,
    pub requires_web: bool,
    pub labels: Vec<String>,
    pub source: SourceKind,
    /// `owner/name`, a URL or a local path.
    pub repo: String,
    /// Total complexity score, 0–10.
    pub complexity: u32,
}

/// Why an earlier rule did not match: its first failing predicate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleMiss {
    pub rule: String,
    pub predicate: String,
    pub expected: String,
    pub actual: String,
}

impl fmt::Display for RuleMiss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rule `{}`: {} expected {}, got {}",
            self.rule, self.predicate, self.expected, self.actual
        )
    }
}

/// The outcome of routing one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteDecision {
    /// The matched rule's name, or `default`.
    pub rule: String,
    pub agent: String,
    /// Agents to try next on quota, in order.
    pub fallback: Vec<String>,
    /// The rule's identity, overriding the agent profile's and the global default.
    pub identity: Option<String>,
    /// Every rule before the matched one, with the predicate that failed.
    pub skipped: Vec<RuleMiss>,
    /// Set when the routed agent's context window was too small and the chain was
    /// shortened (`routing::context_fit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

impl RouteDecision {
    /// The agent followed by its fallbacks.
    pub fn chain(&self) -> Vec<&str> {
        std::iter::once(self.agent.as_str())
            .chain(self.fallback.iter().map(String::as_str))
            .collect()
    }
}

/// A routing.yaml that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoutingError {
    #[error("routing rule #{index} has an empty name: give every rule a `name`")]
    EmptyRuleName { index: usize },
    #[error("routing rule `{rule}` appears twice: rule names must be unique")]
    DuplicateRule { rule: String },
    #[error("routing rule `{rule}`: the name `default` is reserved for the `default:` section")]
    ReservedName { rule: String },
    #[error("routing rule `{rule}`: `{field}` is empty: name an agent from agents.yaml")]
    EmptyAgent { rule: String, field: String },
    #[error("routing rule `{rule}`: unknown agent `{agent}` in `{field}`{hint}")]
    UnknownAgent {
        rule: String,
        field: String,
        agent: String,
        hint: String,
    },
    #[error("routing rule `{rule}`: agent `{agent}` appears twice in its chain (agent + fallback): list each agent once")]
    RepeatedAgent { rule: String, agent: String },
    #[error("routing rule `{rule}`: `match.{predicate}` is an empty list: list at least one value or remove the predicate")]
    EmptyList { rule: String, predicate: String },
    #[error("routing rule `{rule}`: `match.{predicate}` value `{value}` is not valid: {why}")]
    BadValue {
        rule: String,
        predicate: String,
        value: String,
        why: String,
    },
}

#[derive(Debug, Clone)]
struct Target {
    agent: String,
    fallback: Vec<String>,
    identity: Option<String>,
}

#[derive(Debug, Clone)]
struct CompiledRule {
    name: String,
    predicates: Vec<Predicate>,
    target: Target,
}

/// A compiled, validated routing.yaml.
#[derive(Debug, Clone)]
pub struct Router {
    rules: Vec<CompiledRule>,
    default: Target,
}

impl Router {
    /// Compiles and validates everything except agent names.
    pub fn new(file: &RoutingFile) -> Result<Router, RoutingError> {
        let mut names = BTreeSet::new();
        let mut rules = Vec::with_capacity(file.rules.len());
        for (i, rule) in file.rules.iter().enumerate() {
            let name = rule.name.trim();
            if name.is_empty() {
                return Err(RoutingError::EmptyRuleName { index: i + 1 });
            }
            if name == DEFAULT_RULE {
                return Err(RoutingError::ReservedName { rule: name.into() });
            }
            if !names.insert(name.to_string()) {
                return Err(RoutingError::DuplicateRule { rule: name.into() });
            }
            rules.push(CompiledRule {
                name: name.to_string(),
                predicates: compile_match(name, &rule.match_)?,
                target: compile_target(name, &rule.agent, &rule.fallback, &rule.identity)?,
            });
        }
        let d = &file.default;
        let default = compile_target(DEFAULT_RULE, &d.agent, &d.fallback, &d.identity)?;
        Ok(Router { rules, default })
    }

    /// Compiles and checks that every agent named is one of `known_agents`.
    pub fn compile<S: AsRef<str>>(
        file: &RoutingFile,
        known_agents: &[S],
    ) -> Result<Router, RoutingError> {
        let router = Router::new(file)?;
        let known: Vec<&str> = known_agents.iter().map(AsRef::as_ref).collect();
        let targets = router
            .rules
            .iter()
            .map(|r| (r.name.as_str(), &r.target))
            .chain(std::iter::once((DEFAULT_RULE, &router.default)));
        for (rule, target) in targets {
            let named = std::iter::once(("agent", &target.agent))
                .chain(target.fallback.iter().map(|a| ("fallback", a)));
            for (field, agent) in named {
                if !known.contains(&agent.as_str()) {
                    return Err(RoutingError::UnknownAgent {
                        rule: rule.to_string(),
                        field: field.to_string(),
                        agent: agent.clone(),
                        hint: hint(agent, &known),
                    });
                }
            }
        }
        Ok(router)
    }

    /// Names of the rules in evaluation order (without `default`).
    pub fn rule_names(&self) -> Vec<&str> {
        self.rules.iter().map(|r| r.name.as_str()).collect()
    }

    /// Routes a task. Total and deterministic: always returns a decision.
    pub fn route(&self, input: &RouteInput) -> RouteDecision {
        let mut skipped = Vec::new();
        for rule in &self.rules {
            match rule.predicates.iter().find(|p| !p.holds(input)) {
                Some(p) => skipped.push(RuleMiss {
                    rule: rule.name.clone(),
                    predicate: p.name().to_string(),
                    expected: p.expected(),
                    actual: p.actual(input),
                }),
                None => return decision(&rule.name, &rule.target, skipped),
            }
        }
        decision(DEFAULT_RULE, &self.default, skipped)
    }
}

fn decision(rule: &str, target: &Target, skipped: Vec<RuleMiss>) -> RouteDecision {
    RouteDecision {
        rule: rule.to_string(),
        agent: target.agent.clone(),
        fallback: target.fallback.clone(),
        identity: target.identity.clone(),
        skipped,
        context: None,
    }
}

fn hint(value: &str, known: &[&str]) -> String {
    let best = known
        .iter()
        .map(|k| (strsim::jaro_winkler(value, k), *k))
        .filter(|(s, _)| *s > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((_, k)) => format!(" (did you mean `{k}`?)"),
        None if known.is_empty() => " (no agents are defined in agents.yaml)".to_string(),
        None => format!(" (known agents: {})", known.join(", ")),
    }
}

fn compile_target(
    rule: &str,
    agent: &str,
    fallback: &[String],
    identity: &Option<String>,
) -> Result<Target, RoutingError> {
    let agent = agent.trim();
    if agent.is_empty() {
        return Err(RoutingError::EmptyAgent {
            rule: rule.into(),
            field: "agent".into(),
        });
    }
    let mut chain = vec![agent.to_string()];
    for a in fallback {
        let a = a.trim();
        if a.is_empty() {
            return Err(RoutingError::EmptyAgent {
                rule: rule.into(),
                field: "fallback".into(),
            });
        }
        if chain.iter().any(|c| c == a) {
            return Err(RoutingError::RepeatedAgent {
                rule: rule.into(),
                agent: a.into(),
            });
        }
        chain.push(a.to_string());
    }
    let identity = match identity.as_deref().map(str::trim) {
        Some("") => {
            return Err(RoutingError::EmptyAgent {
                rule: rule.into(),
                field: "identity".into(),
            })
        }
        other => other.map(str::to_string),
    };
    Ok(Target {
        agent: chain.remove(0),
        fallback: chain,
        identity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::{DefaultRuleConfig, RuleConfig};
    use proptest::prelude::*;

    fn input() -> RouteInput {
        RouteInput {
            task_type: TaskType::Feature,
            risk: Risk::Low,
            scope: Scope::Small,
            requires_web: false,
            labels: vec![],
            source: SourceKind::Local,
            repo: "/srv/repos/app".into(),
            complexity: 0,
        }
    }

    fn rule(name: &str, m: &str, agent: &str) -> RuleConfig {
        RuleConfig {
            name: name.into(),
            match_: serde_yaml::from_str(m).unwrap(),
            agent: agent.into(),
            fallback: vec![],
            identity: None,
        }
    }

    fn file(rules: Vec<RuleConfig>) -> RoutingFile {
        RoutingFile {
            rules,
            default: DefaultRuleConfig {
                agent: "claude".into(),
                fallback: vec!["codex".into(), "kimi".into()],
                identity: None,
            },
        }
    }

    /// One rule with match `m`: does `input` (modified by `f`) match it?
    fn check(m: &str, f: impl Fn(&mut RouteInput), expect: bool) {
        let router = Router::new(&file(vec![rule("r", m, "codex")])).unwrap();
        let mut i = input();
        f(&mut i);
        let d = router.route(&i);
        assert_eq!(d.rule == "r", expect, "match {m} on {i:?}: {d:?}");
    }

    #[test]
    fn every_predicate() {
        check("{}", |_| {}, true);
        check(
            "task_type: bugfix",
            |i| i.task_type = TaskType::Bugfix,
            true,
        );
        check("task_type: bugfix", |_| {}, false);
        check(
            "task_type: [bugfix, docs]",
            |i| i.task_type = TaskType::Docs,
            true,
        );
        check(
            "task_type: [bugfix, docs]",
            |i| i.task_type = TaskType::Refactor,
            false,
        );
        check("risk: high", |i| i.risk = Risk::High, true);
        check("risk: [medium, high]", |_| {}, false);
        check("risk: [medium, high]", |i| i.risk = Risk::Medium, true);
        check("scope: small", |_| {}, true);
        check("scope: [medium, large]", |_| {}, false);
        check("scope: [medium, large]", |i| i.scope = Scope::Large, true);
        check("requires_web: true", |_| {}, false);
        check("requires_web: true", |i| i.requires_web = true, true);
        check("requires_web: false", |_| {}, true);
        check("labels: needs-web", |_| {}, false);
        check(
            "labels: needs-web",
            |i| i.labels = vec!["Needs-Web".into()],
            true,
        );
        check(
            "labels: [a, b]",
            |i| i.labels = vec!["x".into(), "b".into()],
            true,
        );
        check("labels: [a, b]", |i| i.labels = vec!["x".into()], false);
        check("source: github", |_| {}, false);
        check("source: [github, local]", |_| {}, true);
        check("source: github", |i| i.source = SourceKind::Github, true);
        check("repo: 'acme/*'", |i| i.repo = "acme/api".into(), true);
        check("repo: 'acme/*'", |i| i.repo = "other/api".into(), false);
        check(
            "repo: 'acme/*'",
            |i| i.repo = "https://github.com/Acme/api.git".into(),
            true,
        );
        check(
            "repo: 'acme/*'",
            |i| i.repo = "git@github.com:acme/api.git".into(),
            true,
        );
        check("repo: '/srv/repos/*'", |_| {}, true);
        check("repo: ['x/*', '**/app']", |_| {}, true);
        check("repo: 'acme/api'", |i| i.repo = "acme/api#42".into(), true);
        check("complexity: {min: 7}", |i| i.complexity = 6, false);
        check("complexity: {min: 7}", |i| i.complexity = 7, true);
        check("complexity: {max: 3}", |i| i.complexity = 3, true);
        check("complexity: {max: 3}", |i| i.complexity = 4, false);
        check("complexity: {min: 2, max: 4}", |i| i.complexity = 1, false);
        check("complexity: {min: 2, max: 4}", |i| i.complexity = 2, true);
        check("complexity: {min: 2, max: 4}", |i| i.complexity = 4, true);
        check("complexity: {min: 2, max: 4}", |i| i.complexity = 5, false);
        check("complexity: {}", |i| i.complexity = 10, true);
        // All predicates of a rule must hold.
        check(
            "{task_type: bugfix, scope: small}",
            |i| i.task_type = TaskType::Bugfix,
            true,
        );
        check(
            "{task_type: bugfix, scope: small}",
            |i| {
                i.task_type = TaskType::Bugfix;
                i.scope = Scope::Medium
            },
            false,
        );
    }

    #[test]
    fn first_match_wins_and_misses_are_explained() {
        let router = Router::new(&file(vec![
            rule("docs", "task_type: docs", "kimi"),
            rule("hard", "complexity: {min: 7}", "claude"),
            rule("small", "scope: small", "codex"),
            rule("also-small", "scope: small", "gemini"),
        ]))
        .unwrap();
        let mut i = input();
        i.complexity = 3;
        let d = router.route(&i);
        assert_eq!((d.rule.as_str(), d.agent.as_str()), ("small", "codex"));
        assert_eq!(
            d.skipped,
            vec![
                RuleMiss {
                    rule: "docs".into(),
                    predicate: "task_type".into(),
                    expected: "docs".into(),
                    actual: "feature".into()
                },
                RuleMiss {
                    rule: "hard".into(),
                    predicate: "complexity".into(),
                    expected: ">= 7".into(),
                    actual: "3".into()
                },
            ]
        );
        assert_eq!(
            d.skipped[1].to_string(),
            "rule `hard`: complexity expected >= 7, got 3"
        );
    }

    #[test]
    fn default_applies_when_nothing_matches() {
        let router = Router::new(&file(vec![rule("docs", "task_type: docs", "kimi")])).unwrap();
        let d = router.route(&input());
        assert_eq!(d.rule, "default");
        assert_eq!(d.chain(), vec!["claude", "codex", "kimi"]);
        assert_eq!(d.skipped.len(), 1);
    }

    #[test]
    fn the_rule_identity_and_fallback_are_carried() {
        let mut r = rule("r", "{}", "codex");
        r.fallback = vec!["claude".into()];
        r.identity = Some("work".into());
        let d = Router::new(&file(vec![r])).unwrap().route(&input());
        assert_eq!(d.fallback, vec!["claude"]);
        assert_eq!(d.identity.as_deref(), Some("work"));
    }

    #[test]
    fn validation_names_the_rule() {
        fn check(rules: Vec<RuleConfig>, expect: &str) {
            let err = Router::compile(&file(rules), &["claude", "codex", "kimi"]).unwrap_err();
            assert_eq!(err.to_string(), expect);
        }
        check(
            vec![rule("r", "{}", "claud")],
            "routing rule `r`: unknown agent `claud` in `agent` (did you mean `claude`?)",
        );
        check(
            vec![RuleConfig {
                fallback: vec!["gpt".into()],
                ..rule("r", "{}", "codex")
            }],
            "routing rule `r`: unknown agent `gpt` in `fallback` (known agents: claude, codex, kimi)",
        );
        check(
            vec![rule("r", "{}", " ")],
            "routing rule `r`: `agent` is empty: name an agent from agents.yaml",
        );
        check(
            vec![RuleConfig {
                fallback: vec!["".into()],
                ..rule("r", "{}", "codex")
            }],
            "routing rule `r`: `fallback` is empty: name an agent from agents.yaml",
        );
        check(
            vec![RuleConfig {
                fallback: vec!["claude".into(), "codex".into()],
                ..rule("r", "{}", "codex")
            }],
            "routing rule `r`: agent `codex` appears twice in its chain (agent + fallback): list each agent once",
        );
        check(
            vec![rule("r", "task_type: bugfx", "codex")],
            "routing rule `r`: `match.task_type` value `bugfx` is not valid: unknown task type `bugfx` (expected one of bugfix, feature, docs, refactor, research, migration, review)",
        );
        check(
            vec![rule("r", "risk: [low, huge]", "codex")],
            "routing rule `r`: `match.risk` value `huge` is not valid: unknown risk `huge` (expected low, medium or high)",
        );
        check(
            vec![rule("r", "scope: tiny", "codex")],
            "routing rule `r`: `match.scope` value `tiny` is not valid: unknown scope `tiny` (expected small, medium or large)",
        );
        check(
            vec![rule("r", "source: gitlab", "codex")],
            "routing rule `r`: `match.source` value `gitlab` is not valid: unknown source `gitlab` (expected github or local)",
        );
        check(
            vec![rule("r", "labels: []", "codex")],
            "routing rule `r`: `match.labels` is an empty list: list at least one value or remove the predicate",
        );
        check(
            vec![rule("r", "repo: 'a/[b'", "codex")],
            "routing rule `r`: `match.repo` value `a/[b` is not valid: unclosed character class; missing ']'",
        );
        check(
            vec![rule("r", "complexity: {min: 8, max: 3}", "codex")],
            "routing rule `r`: `match.complexity` value `{min: 8, max: 3}` is not valid: min is greater than max",
        );
        check(
            vec![rule("r", "complexity: {max: 11}", "codex")],
            "routing rule `r`: `match.complexity` value `11` is not valid: the complexity score runs from 0 to 10",
        );
        check(
            vec![rule("r", "{}", "codex"), rule("r", "{}", "kimi")],
            "routing rule `r` appears twice: rule names must be unique",
        );
        check(
            vec![rule("", "{}", "codex")],
            "routing rule #1 has an empty name: give every rule a `name`",
        );
        check(
            vec![rule("default", "{}", "codex")],
            "routing rule `default`: the name `default` is reserved for the `default:` section",
        );
        let mut f = file(vec![]);
        f.default.agent = "gemini".into();
        assert_eq!(
            Router::compile(&f, &["claude", "codex", "kimi"])
                .unwrap_err()
                .to_string(),
            "routing rule `default`: unknown agent `gemini` in `agent` (known agents: claude, codex, kimi)"
        );
    }

    fn arb_input() -> impl Strategy<Value = RouteInput> {
        (
            prop::sample::select(TaskType::ALL.to_vec()),
            prop::sample::select(vec![Risk::Low, Risk::Medium, Risk::High]),
            prop::sample::select(vec![Scope::Small, Scope::Medium, Scope::Large]),
            any::<bool>(),
            prop::collection::vec(
                prop::sample::select(vec!["bug", "needs-web", "docs", "x"]),
                0..3,
            ),
            prop::sample::select(vec![SourceKind::Github, SourceKind::Local]),
            prop::sample::select(vec![
                "acme/api",
                "https://github.com/acme/web.git",
                "/srv/app",
                "other/x",
            ]),
            0u32..=10,
        )
            .prop_map(
                |(task_type, risk, scope, requires_web, labels, source, repo, complexity)| {
                    RouteInput {
                        task_type,
                        risk,
                        scope,
                        requires_web,
                        labels: labels.into_iter().map(String::from).collect(),
                        source,
                        repo: repo.into(),
                        complexity,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn routing_is_total_and_deterministic(i in arb_input()) {
            let router = Router::compile(&file(vec![
                rule("web", "{requires_web: true, task_type: [research, feature]}", "gemini"),
                rule("hard", "{complexity: {min: 7}, risk: [medium, high]}", "claude"),
                rule("acme", "{repo: 'acme/*', source: github}", "codex"),
                rule("bugs", "{labels: [bug], scope: small}", "codex"),
                rule("docs", "task_type: docs", "kimi"),
            ]), &["claude", "codex", "kimi", "gemini"]).unwrap();
            let d = router.route(&i);
            prop_assert_eq!(&d, &router.route(&i));
            let names = router.rule_names();
            let pos = names.iter().position(|n| *n == d.rule).unwrap_or(names.len());
            prop_assert!(d.rule == DEFAULT_RULE || pos < names.len());
            // Every rule before the winner is explained, and none after it.
            prop_assert_eq!(d.skipped.len(), pos);
            for (miss, name) in d.skipped.iter().zip(&names) {
                prop_assert_eq!(&miss.rule, name);
            }
        }
    }
}
