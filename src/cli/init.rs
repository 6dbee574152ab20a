//! `polyphony init`: writes the four commented templates into the home.

use anyhow::Context as _;

use super::{Context, Outcome};
use crate::config::templates;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Overwrite files that already exist.
    #[arg(long)]
    force: bool,
    /// Only these agents can run here (their CLIs are logged in): the templates define and
    /// route to them alone (claude, codex, kimi, gemini; comma-separated). Without it, every
    /// template agent is defined, and `init` says which logins it found.
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    agents: Vec<String>,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    crate::private::create_dir(&ctx.home)
        .with_context(|| format!("cannot create the home {}", ctx.home.display()))?;
    let files: Vec<(&str, String)> = if args.agents.is_empty() {
        templates::ALL
            .iter()
            .map(|(n, t)| (*n, t.to_string()))
            .collect()
    } else {
        let mut agents: Vec<String> = Vec::new();
        for a in &args.agents {
            let a = a.trim().to_ascii_lowercase();
            if !templates::TEMPLATE_AGENTS.contains(&a.as_str()) {
                return Err(super::UsageError::new(
                    format!("--agents: no template agent `{a}`"),
                    format!(
                        "name some of {} (comma-separated), e.g. `--agents claude,codex`",
                        templates::TEMPLATE_AGENTS.join(", ")
                    ),
                )
                .into());
            }
            if !agents.contains(&a) {
                agents.push(a);
            }
        }
        templates::for_agents(&agents).into_iter().collect()
    };
    for (name, text) in &files {
        let path = ctx.home.join(name);
        let exists = path.exists();
        if exists && !args.force {
            println!("skipped {} (exists; --force overwrites)", path.display());
            continue;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        let verb = if exists { "overwrote" } else { "wrote" };
        println!("{verb} {}", path.display());
    }
    if args.agents.is_empty() {
        // Which CLIs look logged in (their login directory exists under $HOME).
        let found: Vec<&str> = std::env::var_os("HOME")
            .map(std::path::PathBuf::from)
            .map(|home| {
                templates::TEMPLATE_AGENTS
                    .iter()
                    .copied()
                    .filter(|a| home.join(format!(".{a}")).is_dir())
                    .collect()
            })
            .unwrap_or_default();
        if !found.is_empty() && found.len() < templates::TEMPLATE_AGENTS.len() {
            println!(
                "logins found for {}: `polyphony init --force --agents {}` routes work only to them",
                found.join(", "),
                found.join(",")
            );
        }
    }
    println!("next: edit the files, then run `polyphony config check`");
    Ok(Outcome::Success)
}
