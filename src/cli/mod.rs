//! The command line: argument parsing (clap derive), logging setup and one module per
//! verb. Verbs are thin: they parse, call the library and print.
//!
//! Adding a verb: one variant in [`Command`], one module with `Args` and
//! `run(args, &Context) -> anyhow::Result<Outcome>`, one arm in [`run`].
//!
//! Architecture Invariant: no business logic here, and no exit codes: `main` maps an
//! [`Outcome`] or an error to the process exit code through [`exit_code`].
//! API Boundary: every `--json` output (scripts parse it).

mod backup;
mod cancel;
mod cleanup;
mod completions;
mod config;
mod daemon;
mod demo;
mod demo_real;
mod demo_report;
mod doctor;
mod egress_proxy;
mod enqueue;
mod help;
mod init;
mod logs;
pub mod replay;
mod retry;
pub mod route;
mod spawn;
mod status;

use std::io::IsTerminal as _;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Polyphony turns labelled GitHub issues and locally queued tasks into verified pull
/// requests, one coding agent per container.
#[derive(Debug, Parser)]
#[command(
    name = "polyphony",
    version,
    about,
    propagate_version = true,
    after_long_help = help::TOP
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every verb accepts.
#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
    /// More log output on stderr (-v info, -vv debug, -vvv trace); RUST_LOG also works.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Polyphony home (default: $POLYPHONY_HOME, else ~/.polyphony).
    #[arg(long, value_name = "PATH", global = true)]
    pub home: Option<PathBuf>,
    /// Print only errors and the result: no progress lines, no warnings.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write the commented config templates into the home (never overwrites without --force).
    #[command(after_long_help = help::INIT)]
    Init(init::Args),
    /// Inspect the configuration.
    #[command(after_long_help = help::CONFIG)]
    Config(config::Args),
    /// Add a task to the local queue.
    #[command(after_long_help = help::ENQUEUE)]
    Enqueue(enqueue::Args),
    /// Show tasks, or one task with its transitions and attempts.
    #[command(after_long_help = help::STATUS)]
    Status(status::Args),
    /// Show how a task routes: complexity score with evidence, the matched rule, and why
    /// each earlier rule did not match.
    #[command(after_long_help = help::ROUTE)]
    Route(route::RouteArgs),
    /// Parse a saved agent transcript and print its events summary and outcome.
    #[command(after_long_help = help::REPLAY)]
    Replay(replay::ReplayArgs),
    /// Take one task through the whole pipeline in the foreground (exit 0 when it lands).
    #[command(after_long_help = help::SPAWN)]
    Spawn(spawn::Args),
    /// Bring a BLOCKED task back once its cause is fixed, as a new generation linked to
    /// the old one (--blocked: every BLOCKED task).
    #[command(after_long_help = help::RETRY)]
    Retry(retry::Args),
    /// Stop a task for good: its running attempt's container is killed, the task ends
    /// CANCELLED (no failure counted) and its GitHub claim is released.
    #[command(after_long_help = help::CANCEL)]
    Cancel(cancel::Args),
    /// Run the supervisor: poll sources, dispatch attempts, recover after a crash.
    #[command(after_long_help = help::DAEMON)]
    Daemon(daemon::Args),
    /// Build the offline test image, make a sample repository and run four tasks through
    /// the daemon: one lands, one lands on a repair retry, one on a fallback agent, one
    /// ends BLOCKED.
    #[command(after_long_help = help::DEMO)]
    Demo(demo::Args),
    /// Print an attempt's transcript: assistant text, tool calls, results (--follow tails it).
    #[command(after_long_help = help::LOGS)]
    Logs(logs::Args),
    /// Check the engine, images, git, config, credentials and GitHub token; say how to fix.
    #[command(after_long_help = help::DOCTOR)]
    Doctor(doctor::Args),
    /// Remove this home's leftover containers, finished workspaces and stale locks.
    #[command(after_long_help = help::CLEANUP)]
    Cleanup(cleanup::Args),
    /// Write a consistent copy of the queue database, safe while the daemon runs.
    #[command(after_long_help = help::BACKUP)]
    Backup(backup::Args),
    /// The per-attempt egress proxy (run by the daemon inside its own container).
    #[command(hide = true)]
    EgressProxy(egress_proxy::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_long_help = help::COMPLETIONS)]
    Completions(completions::Args),
    /// Print the manual page (roff): `polyphony man | man -l -`.
    #[command(after_long_help = help::MAN)]
    Man(completions::ManArgs),
}

/// How a verb ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Success,
    /// The task ran but did not land: exit 1.
    NotLanded,
}

/// What every verb gets besides its own arguments.
#[derive(Debug, Clone)]
pub struct Context {
    /// The resolved, absolute Polyphony home.
    pub home: PathBuf,
    /// Logs are JSON lines (`--log-format json`): long-running verbs then report progress
    /// through the log instead of human lines.
    pub log_json: bool,
    /// `--quiet`: verbs print only errors and their result (no progress lines).
    pub quiet: bool,
    /// The queue the soundness check opened before the verb ran, for the verb to take
    /// ([`Context::open_store`]) instead of opening the file a second time.
    pub checked: CheckedQueue,
}

/// The SQLite queue `run` opened to check it (`check_queue`), kept for the verb: opening
/// queue.db twice costs a verb like `status ID --json` half its time (each open and close
/// creates and removes the write-ahead log and shared-memory files).
#[derive(Clone, Default)]
pub struct CheckedQueue(std::sync::Arc<std::sync::Mutex<Option<crate::store::Store>>>);

impl std::fmt::Debug for CheckedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckedQueue")
    }
}

impl Context {
    /// Opens the store `handle` names: the connection the soundness check already opened
    /// when it is that same SQLite file (taken once), else a new one.
    pub fn open_store(
        &self,
        handle: &crate::store::StoreHandle,
    ) -> crate::store::Result<crate::store::Store> {
        let mut kept = self.checked.0.lock().unwrap_or_else(|p| p.into_inner());
        match kept.take() {
            Some(store) if handle.sqlite_path() == Some(store.path()) => Ok(store),
            _ => handle.open(),
        }
    }
}

pub use crate::error::UsageError;

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<Outcome> {
    // The proxy runs in a container with no home: it needs none.
    let command = match cli.command {
        Command::EgressProxy(args) => return egress_proxy::run(args),
        other => other,
    };
    let home = crate::config::home_from_env(cli.global.home.as_deref())?;
    tracing::debug!(home = %home.display(), "resolved home");
    let ctx = Context {
        home,
        log_json: cli.global.log_format == LogFormat::Json,
        quiet: cli.global.quiet,
        checked: CheckedQueue::default(),
    };
    let db = crate::config::db_path(&ctx.home);
    // Issue 24: every verb that reads the queue checks it first (the remembered verdict,
    // `store::health`, keeps this one stat while the file is unchanged), so a damaged
    // file is never read as if it were a shorter queue. The verdict is remembered only
    // once the verb succeeded: a refused verb leaves the home as it was.
    // `status` takes the checked connection over (one open of queue.db per look); the
    // other verbs open their own, as they always did.
    let keep = matches!(command, Command::Status(_)).then_some(&ctx.checked);
    let sound = match reads_queue(&command) {
        true => check_queue(&db, keep),
        false => Ok(None),
    };
    let result = sound.and_then(|sound| {
        let result = dispatch(command, &ctx);
        if let (Ok(_), Some(sound)) = (&result, sound) {
            sound.remember();
        }
        result
    });
    // A damaged queue.db is reported the same way by every verb: the file and how to
    // recover (issue 12), never as whatever query happened to meet it.
    result.map_err(|e| match crate::store::damage_in(&e, &db) {
        Some(damaged) => anyhow::Error::new(damaged),
        None => e,
    })
}

/// The verbs that read the queue (`daemon` checks the whole file at its start, `doctor`
/// reports the damage as one of its checks).
fn reads_queue(command: &Command) -> bool {
    matches!(
        command,
        Command::Enqueue(_)
            | Command::Status(_)
            | Command::Route(_)
            | Command::Spawn(_)
            | Command::Retry(_)
            | Command::Logs(_)
            | Command::Cleanup(_)
            | Command::Backup(_)
    )
}

/// The queue's soundness verdict, `None` when there is no queue yet (each verb says what
/// that means for it).
fn check_queue(
    db: &std::path::Path,
    keep: Option<&CheckedQueue>,
) -> anyhow::Result<Option<crate::store::Sound>> {
    if std::fs::symlink_metadata(db).is_err() {
        return Ok(None);
    }
    // The SQLite file's own check (a PostgreSQL store has no file: `doctor` checks it).
    let store = crate::store::StoreHandle::sqlite(db).open()?;
    let sound = store.ensure_sound()?;
    if let Some(keep) = keep {
        *keep.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(store);
    }
    Ok(Some(sound))
}

fn dispatch(command: Command, ctx: &Context) -> anyhow::Result<Outcome> {
    let ctx = ctx.clone();
    match command {
        Command::Init(args) => init::run(args, &ctx),
        Command::Config(args) => config::run(args, &ctx),
        Command::Enqueue(args) => enqueue::run(args, &ctx),
        Command::Status(args) => status::run(args, &ctx),
        Command::Route(args) => route::run(args, &ctx),
        Command::Replay(args) => replay::run(&args),
        Command::Spawn(args) => spawn::run(args, &ctx),
        Command::Retry(args) => retry::run(args, &ctx),
        Command::Cancel(args) => cancel::run(args, &ctx),
        Command::Daemon(args) => daemon::run(args, &ctx),
        Command::Demo(args) => demo::run(args, &ctx),
        Command::Logs(args) => logs::run(args, &ctx),
        Command::Doctor(args) => doctor::run(args, &ctx),
        Command::Cleanup(args) => cleanup::run(args, &ctx),
        Command::Backup(args) => backup::run(args, &ctx),
        Command::EgressProxy(args) => egress_proxy::run(args),
        Command::Completions(args) => completions::run(args, &ctx),
        Command::Man(args) => completions::man(args, &ctx),
    }
}

/// The exit code for a failed run: 2 for configuration and usage errors, 1 otherwise.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    use crate::sources::{GithubError, SourceError};
    let usage = err.chain().any(|cause| {
        cause.is::<crate::config::ConfigError>()
            || cause.is::<UsageError>()
            || cause.is::<crate::store::DatabaseDamaged>()
            || cause.is::<crate::home::LockError>()
            || matches!(
                cause.downcast_ref::<crate::store::StoreError>(),
                Some(crate::store::StoreError::ReadOnly { .. })
            )
            || cause
                .downcast_ref::<GithubError>()
                .is_some_and(GithubError::is_config_error)
            || cause
                .downcast_ref::<SourceError>()
                .is_some_and(SourceError::is_config_error)
    });
    if usage {
        2
    } else {
        1
    }
}

/// Sets up tracing on stderr. `-v` flags win over RUST_LOG; with neither, warnings only;
/// `--quiet`, errors only.
pub fn init_logging(verbose: u8, quiet: bool, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = match verbose {
        0 if quiet => EnvFilter::new("error"),
        0 => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        1 => EnvFilter::new("info"),
        2 => EnvFilter::new("debug"),
        _ => EnvFilter::new("trace"),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(use_colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(std::io::stderr);
    // A second initialisation (tests calling run twice) is harmless: keep the first.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Colour only on a terminal, and never when `NO_COLOR` is set to a non-empty value
/// (no-color.org; issue 12: escape codes landed in piped logs).
pub fn use_colour(is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Prints a value as one line of JSON on stdout, streamed (a 100k-task listing is tens
/// of megabytes).
fn print_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer(&mut out, value)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// Runs a future to completion on a fresh single-threaded runtime (verbs are synchronous;
/// only their Docker and GitHub calls are async).
fn block_on<F: std::future::Future>(future: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    Ok(rt.block_on(future))
}
