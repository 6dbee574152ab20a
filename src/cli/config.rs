//! `polyphony config check`: validates the four files and prints the effective config.

use super::{print_json, Context, Outcome};
use crate::config::Config;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ConfigCommand {
    /// Validate the configuration and print it with every default and path resolved.
    #[command(after_long_help = super::help::CONFIG)]
    Check {
        /// Print the effective configuration as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    match args.command {
        ConfigCommand::Check { json } => {
            let config = Config::load(&ctx.home)?;
            for warning in unprotected_check_scripts(&config) {
                eprintln!("warning: {warning}");
            }
            // Accepted by `allow_unsafe: true`: one warning each, on stderr so the YAML
            // and JSON on stdout stay as they were.
            for item in config.unsafe_settings() {
                eprintln!("warning: unsafe setting accepted by allow_unsafe: {item}");
            }
            let effective = config.effective();
            if json {
                print_json(&effective)?;
            } else {
                let defaulted: Vec<&str> = config
                    .files()
                    .iter()
                    .filter(|(_, read)| !**read)
                    .map(|(name, _)| *name)
                    .collect();
                println!("# config OK: {}", ctx.home.display());
                if !defaulted.is_empty() {
                    println!("# missing, defaults used: {}", defaulted.join(", "));
                }
                print!("{}", serde_yaml::to_string(&effective)?);
            }
            Ok(Outcome::Success)
        }
    }
}

/// Issue 11: a verify command that runs a repository file the agent may rewrite judges
/// nothing. One warning per command and file not covered by `protected_paths` (when
/// `protect_check_scripts` is off). Checks named in a repository's `.polyphony.yaml` are
/// read from the base branch at attempt time and are not seen here.
pub fn unprotected_check_scripts(config: &Config) -> Vec<String> {
    use crate::orchestrator::proof::{check_entry_points, ProtectedPaths};
    let g = &config.global().verify;
    if g.protect_check_scripts {
        return Vec::new();
    }
    let mut sections = vec![(
        "verify".to_string(),
        &g.protected_paths,
        [&g.test, &g.lint, &g.typecheck],
    )];
    for (i, r) in config.global().repos.iter().enumerate() {
        if let Some(o) = &r.verify {
            sections.push((
                format!("repos[{i}].verify"),
                o.protected_paths.as_ref().unwrap_or(&g.protected_paths),
                [&o.test, &o.lint, &o.typecheck],
            ));
        }
    }
    let mut warnings = Vec::new();
    for (section, globs, commands) in sections {
        let Ok(protected) = ProtectedPaths::new(globs) else {
            continue;
        };
        for (name, command) in ["test", "lint", "typecheck"].iter().zip(commands) {
            let Some(command) = command else { continue };
            for script in check_entry_points(command) {
                if protected
                    .violations(std::slice::from_ref(&script))
                    .is_empty()
                {
                    warnings.push(format!(
                        "{section}.{name} runs `{script}`, which the agent may change: add it to verify.protected_paths or set verify.protect_check_scripts: true"
                    ));
                }
            }
        }
    }
    warnings
}
