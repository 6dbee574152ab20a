//! Context windows (issue 12): when a task's estimated prompt does not fit the routed
//! agent's `context_window_tokens`, the first agent of the chain whose window fits takes
//! it; when none fits, the task cannot run and the reason says by how much. Pure.

use super::rules::RouteDecision;

/// The routing decision after the context check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextFit {
    /// The routed agent's window holds the estimate (or no window is known).
    Fits(RouteDecision),
    /// Agents whose window is too small were dropped from the chain; the decision's
    /// `context` field says which.
    Rerouted(RouteDecision),
    /// No agent of the chain can hold the estimate: the task cannot run as written.
    TooLarge { reason: String },
}

/// Drops agents whose window (from `window_of`; `None` = unknown, kept) is below `tokens`.
pub fn fit_context(
    decision: RouteDecision,
    tokens: u64,
    window_of: impl Fn(&str) -> Option<u64>,
) -> ContextFit {
    let fits = |agent: &str| window_of(agent).is_none_or(|w| w >= tokens);
    if fits(&decision.agent) {
        return ContextFit::Fits(decision);
    }
    let chain: Vec<String> = decision.chain().into_iter().map(String::from).collect();
    let too_small: Vec<String> = chain
        .iter()
        .filter(|a| !fits(a))
        .map(|a| format!("{a} ({} tokens)", window_of(a).unwrap_or(0)))
        .collect();
    let mut fitting = chain.iter().filter(|a| fits(a)).cloned();
    match fitting.next() {
        Some(agent) => {
            let note = format!(
                "the estimated prompt of ~{tokens} tokens exceeds the context window of {}; routed to `{agent}` instead",
                too_small.join(", ")
            );
            ContextFit::Rerouted(RouteDecision {
                agent,
                fallback: fitting.collect(),
                context: Some(note),
                ..decision
            })
        }
        None => ContextFit::TooLarge {
            reason: format!(
                "the estimated prompt of ~{tokens} tokens exceeds the context window of every agent of the chain: {}; shorten the task body or the files it mentions, or add an agent with a larger `context_window_tokens` to the routing rule's fallback",
                too_small.join(", ")
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision() -> RouteDecision {
        RouteDecision {
            rule: "r".into(),
            agent: "claude".into(),
            fallback: vec!["codex".into(), "gemini".into()],
            identity: None,
            skipped: vec![],
            context: None,
        }
    }

    fn window(agent: &str) -> Option<u64> {
        match agent {
            "claude" => Some(200_000),
            "codex" => Some(272_000),
            "gemini" => Some(1_048_576),
            _ => None,
        }
    }

    #[test]
    fn fits_reroutes_or_is_too_large() {
        assert_eq!(
            fit_context(decision(), 150_000, window),
            ContextFit::Fits(decision())
        );
        match fit_context(decision(), 300_000, window) {
            ContextFit::Rerouted(d) => {
                assert_eq!(d.agent, "gemini");
                assert!(d.fallback.is_empty());
                let note = d.context.unwrap();
                assert!(
                    note.contains("~300000 tokens") && note.contains("claude (200000 tokens)"),
                    "{note}"
                );
            }
            other => panic!("{other:?}"),
        }
        match fit_context(decision(), 2_000_000, window) {
            ContextFit::TooLarge { reason } => {
                assert!(
                    reason.contains("every agent") && reason.contains("gemini (1048576 tokens)"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
