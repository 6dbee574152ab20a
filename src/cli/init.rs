//! `polyphony init`: writes the four commented templates into the home.

use anyhow::Context as _;

use super::{Context, Outcome};
use crate::config::templates;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Overwrite files that already exist.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    crate::private::create_dir(&ctx.home)
        .with_context(|| format!("cannot create the home {}", ctx.home.display()))?;
    for (name, text) in templates::ALL {
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
    println!("next: edit the files, then run `polyphony config check`");
    Ok(Outcome::Success)
}
