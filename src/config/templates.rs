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
