//! `polyphony egress-proxy` (hidden): the per-attempt egress proxy, run by the daemon in
//! its own container (`runtime::proxy_image`). Not a verb for people: it needs no home.

use std::path::PathBuf;

use super::Outcome;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// JSON config file; default: the `POLYPHONY_EGRESS_CONFIG` environment variable.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Wait until the --config FILE exists (the daemon writes it once the attempt's
    /// allowlist is known; the proxy starts before that, beside the workspace's clone).
    #[arg(long, requires = "config")]
    pub wait_for_config: bool,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    if let (true, Some(path)) = (args.wait_for_config, &args.config) {
        crate::egress::proxy::wait_for_file(path);
    }
    let config = crate::egress::proxy::load_config(args.config.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(crate::egress::proxy::run(config))?;
    // Stopped, its last line written: out at once, not after a lookup still running on a
    // blocking thread (dropping the runtime would wait for it).
    std::process::exit(0)
}
