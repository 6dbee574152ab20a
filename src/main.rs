//! The `polyphony` binary: parse, set up logging, run, and map the outcome to an exit
//! code. Exit codes are decided here and nowhere else: 0 ok, 1 the task did not land
//! (or the operation failed), 2 usage or configuration error (clap's own errors too).

use std::process::ExitCode;

use clap::Parser;
use polyphony::cli::{self, Cli, Outcome};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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
    cli::init_logging(cli.global.verbose, cli.global.log_format);
    match cli::run(cli) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::NotLanded) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cli::exit_code(&err))
        }
    }
}
