//! The `polyphony` binary: parse, set up logging, run, and map the outcome to an exit
//! code. Exit codes are decided here and nowhere else: 0 ok, 1 the task did not land
//! (or the operation failed), 2 usage or configuration error (clap's own errors too).

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};
use polyphony::cli::{self, Cli, Outcome};

/// `polyphony --version`: the crate version and the commit it was built from (build.rs).
fn version() -> &'static str {
    let commit = env!("POLYPHONY_COMMIT");
    if commit.is_empty() {
        env!("CARGO_PKG_VERSION")
    } else {
        Box::leak(format!("{} (commit {commit})", env!("CARGO_PKG_VERSION")).into_boxed_str())
    }
}

fn main() -> ExitCode {
    let parsed = Cli::command()
        .version(version())
        .try_get_matches()
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    cli::init_logging(cli.global.verbose, cli.global.quiet, cli.global.log_format);
    stop_quietly_on_closed_stdout(&cli.command);
    match cli::run(cli) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::NotLanded) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cli::exit_code(&err))
        }
    }
}

/// `polyphony status | head -1` must end quietly, not panic with exit 101 (issue 12). The
/// Rust runtime ignores SIGPIPE, so a write to a closed pipe fails and `println!` panics.
/// Short-lived verbs take the Unix default back: the kernel ends them at the first write
/// to a closed stdout, silently (status 141 in a shell). The long-running verbs keep
/// SIGPIPE ignored, since their Docker socket writes must fail as errors rather than kill
/// the process; for them a panic hook turns a failed print to stdout into the same quiet
/// exit.
fn stop_quietly_on_closed_stdout(command: &cli::Command) {
    use cli::Command::{Daemon, Demo, Spawn};
    if !matches!(command, Daemon(_) | Demo(_) | Spawn(_)) {
        // SAFETY: called once at start-up, before any thread is spawned.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
        return;
    }
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(128 + libc::SIGPIPE);
        }
        default_hook(info);
    }));
}
