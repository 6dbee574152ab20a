//! The commented config templates, embedded in the binary for `polyphony init`.
//! The files themselves live in `config-examples/`; a test loads them as they are.

pub const CONFIG: &str = include_str!("../../config-examples/config.yaml");
pub const IDENTITIES: &str = include_str!("../../config-examples/identities.yaml");
pub const AGENTS: &str = include_str!("../../config-examples/agents.yaml");
pub const ROUTING: &str = include_str!("../../config-examples/routing.yaml");

/// `(file name, contents)` in the order `init` writes them.
pub const ALL: [(&str, &str); 4] = [
    (super::CONFIG_FILE, CONFIG),
    (super::IDENTITIES_FILE, IDENTITIES),
    (super::AGENTS_FILE, AGENTS),
    (super::ROUTING_FILE, ROUTING),
];

/// The agent profiles the templates define, in their order.
pub const TEMPLATE_AGENTS: [&str; 4] = ["claude", "codex", "kimi", "gemini"];

/// The four templates for a home whose only runnable agents are `agents` (`init --agents
/// claude,codex`, issue 29): agents.yaml keeps only their profiles, identities.yaml only
/// their login volumes, routing.yaml drops the rules whose agent is not among them, keeps
/// only them in each fallback, and its default takes the first of them (claude when
/// listed) with the others as fallbacks. Comments stay. `agents` must be non-empty names
/// of [`TEMPLATE_AGENTS`] (the caller checks).
pub fn for_agents(agents: &[String]) -> [(&'static str, String); 4] {
    let has = |a: &str| agents.iter().any(|x| x == a);
    [
        (super::CONFIG_FILE, CONFIG.to_string()),
        (super::IDENTITIES_FILE, identities_for(IDENTITIES, &has)),
        (super::AGENTS_FILE, agents_for(AGENTS, &has)),
        (super::ROUTING_FILE, routing_for(ROUTING, agents)),
    ]
}

/// The uncommented `      claude: ~/.claude` volume lines of agents not kept go.
fn identities_for(text: &str, has: &dyn Fn(&str) -> bool) -> String {
    lines_where(text, |line| {
        let t = line.trim_start();
        let volume = line.starts_with("      ") && !t.starts_with('#');
        !(volume
            && TEMPLATE_AGENTS
                .iter()
                .any(|a| t.starts_with(&format!("{a}: ~/")) && !has(a)))
    })
}

/// The profile paragraphs (comments, `- name: X` and its fields) of agents not kept go.
fn agents_for(text: &str, has: &dyn Fn(&str) -> bool) -> String {
    paragraphs(text)
        .into_iter()
        .filter_map(|p| match field(&p, "  - name: ") {
            Some(name) if !has(&name) => headers(&p),
            _ => Some(p),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn routing_for(text: &str, agents: &[String]) -> String {
    let keep = |a: &str| agents.iter().any(|x| x == a);
    let list = |names: Vec<&String>| {
        format!(
            "[{}]",
            names
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let mut out = Vec::new();
    let mut rules = 0;
    for p in paragraphs(text) {
        if p.contains("\ndefault:") || p.starts_with("default:") {
            let agent = if keep("claude") {
                "claude".to_string()
            } else {
                agents[0].clone()
            };
            let others: Vec<&String> = agents.iter().filter(|a| **a != agent).collect();
            out.push(rewrite(&p, |line| {
                if line.starts_with("  agent: ") {
                    Some(format!("  agent: {agent}"))
                } else if line.starts_with("  fallback: ") {
                    Some(format!("  fallback: {}", list(others.clone())))
                } else {
                    None
                }
            }));
            continue;
        }
        match field(&p, "    agent: ") {
            Some(agent) if !keep(&agent) => out.extend(headers(&p)),
            Some(agent) => out.push({
                rules += 1;
                rewrite(&p, |line| {
                    let rest = line.strip_prefix("    fallback: ")?;
                    let names = rest.trim().trim_start_matches('[').trim_end_matches(']');
                    let kept: Vec<String> = names
                        .split(',')
                        .map(|n| n.trim().to_string())
                        .filter(|n| !n.is_empty() && keep(n) && *n != agent)
                        .collect();
                    Some(format!("    fallback: {}", list(kept.iter().collect())))
                })
            }),
            None => out.push(p),
        }
    }
    let text = out.join("\n");
    if rules == 0 {
        // Every rule named an agent not kept: the default routes everything.
        return text.replacen("\nrules:\n", "\nrules: []\n", 1);
    }
    text
}

/// What stays of a dropped paragraph: its top-level keys (`rules:`, `agents:`).
fn headers(p: &str) -> Option<String> {
    let kept: String = p
        .split_inclusive('\n')
        .filter(|l| !l.starts_with([' ', '#', '\n']))
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// Blank-line separated paragraphs, each with its trailing newline(s) as written.
fn paragraphs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() && !current.is_empty() {
            out.push(std::mem::take(&mut current));
            continue;
        }
        current.push_str(line);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The value of the first line of `p` starting with `prefix`.
fn field(p: &str, prefix: &str) -> Option<String> {
    p.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map(|v| v.trim().to_string())
}

fn rewrite(p: &str, mut f: impl FnMut(&str) -> Option<String>) -> String {
    p.split_inclusive('\n')
        .map(|l| match f(l.trim_end_matches('\n')) {
            Some(new) => format!("{new}\n"),
            None => l.to_string(),
        })
        .collect()
}

fn lines_where(text: &str, keep: impl Fn(&str) -> bool) -> String {
    text.split_inclusive('\n')
        .filter(|l| keep(l.trim_end_matches('\n')))
        .collect()
}
