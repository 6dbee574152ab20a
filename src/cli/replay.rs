//! `polyphony replay FILE --agent claude|codex|kimi|gemini [--json]`: parse a saved
//! transcript and print its events summary and outcome (spec §9).
//!
//! Exit codes: 0 the run succeeded, 1 it did not (failed, out of quota or incomplete);
//! 2 for every input that cannot be read.
//! No business logic here: `agents::replay` does the work.

use anyhow::Context;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use crate::agents::adapter_for;
use crate::agents::replay::{render_text, replay, ReplayStatus};
use crate::domain::AgentType;

#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Transcript file (NDJSON, one CLI output line per line).
    pub file: PathBuf,
    /// Which CLI wrote it: claude, codex, kimi, gemini or opencode.
    #[arg(long)]
    pub agent: AgentType,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs the verb. Exit 0 when the transcript shows a successful run, 1 otherwise (failed,
/// out of quota or incomplete: the printed status says which).
pub fn run(args: &ReplayArgs) -> anyhow::Result<super::Outcome> {
    let file = File::open(&args.file).map_err(|e| {
        super::UsageError::new(
            format!("cannot open transcript {}: {e}", args.file.display()),
            "give the path of a saved .ndjson transcript (e.g. $POLYPHONY_HOME/transcripts/<task>/<attempt>.ndjson)",
        )
    })?;
    let adapter = adapter_for(args.agent);
    // Every unreadable input (missing, a directory, unreadable bytes) is the same usage
    // error, exit 2 (issue 12: a directory used to exit 1 and a missing file 2).
    let summary =
        replay(BufReader::with_capacity(1 << 20, file), adapter.as_ref()).map_err(|e| {
            super::UsageError::new(
                format!("cannot read transcript {}: {e}", args.file.display()),
                "give the path of a saved .ndjson transcript file (e.g. $POLYPHONY_HOME/transcripts/<task>/<attempt>.ndjson)",
            )
        })?;
    if args.json {
        let json = serde_json::to_string_pretty(&summary).context("cannot encode the summary")?;
        println!("{json}");
    } else {
        print!(
            "{}",
            render_text(&summary, &args.file.display().to_string())
        );
    }
    Ok(match summary.status {
        ReplayStatus::Succeeded => super::Outcome::Success,
        ReplayStatus::Failed | ReplayStatus::Quota | ReplayStatus::Incomplete => {
            super::Outcome::NotLanded
        }
    })
}
