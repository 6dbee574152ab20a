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
