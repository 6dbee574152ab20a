//! `polyphony egress-proxy` (hidden): the per-attempt egress proxy, run by the daemon in
//! its own container (`runtime::proxy_image`). Not a verb for people: it needs no home.

use std::path::PathBuf;

use super::Outcome;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// JSON config file; default: the `POLYPHONY_EGRESS_CONFIG` environment variable.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let config = crate::egress::proxy::load_config(args.config.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(crate::egress::proxy::run(config))?;
    Ok(Outcome::Success)
}
