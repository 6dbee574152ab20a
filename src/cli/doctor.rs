//! `polyphony doctor`: runs `doctor::run` and prints one line per check (or `--json`).
//! Exit 0 when nothing failed (warnings allowed), 1 otherwise.

use super::{print_json, Context, Outcome};
use crate::ops::doctor;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON: {ok, checks: [{name, level, detail, fix}]}.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args, ctx: &Context) -> anyhow::Result<Outcome> {
    let lookup = |var: &str| std::env::var(var).ok();
    let checks = super::block_on(doctor::run(&ctx.home, &lookup))?;
    let ok = doctor::passed(&checks);
    if args.json {
        print_json(&serde_json::json!({ "ok": ok, "checks": checks }))?;
    } else {
        print!("{}", doctor::render(&checks));
    }
    Ok(if ok {
        Outcome::Success
    } else {
        Outcome::NotLanded
    })
}
