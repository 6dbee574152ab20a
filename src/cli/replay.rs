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
use crate::domain::{AgentType, EventKind};

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

/// The other CLI whose adapter recognises the most lines of the file, with how many.
fn recognised_by(args: &ReplayArgs) -> Option<(AgentType, u64)> {
    AgentType::ALL
        .into_iter()
        .filter(|t| *t != args.agent)
        .filter_map(|t| {
            let file = File::open(&args.file).ok()?;
            let s = replay(
                BufReader::with_capacity(1 << 20, file),
                adapter_for(t).as_ref(),
            )
            .ok()?;
            let known = s.lines - s.count(EventKind::Unknown);
            (known > 0).then_some((t, known))
        })
        .max_by_key(|(_, n)| *n)
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
    // Issue 24: random bytes or another CLI's transcript read as "incomplete" with every
    // line unknown. Not one recognised line: say so, and which CLI's stream it is when
    // another adapter (the same ones the live runtime uses) reads it.
    if summary.lines > 0 && summary.count(EventKind::Unknown) == summary.lines {
        let fix = match recognised_by(args) {
            Some((other, n)) => format!(
                "it reads as {other}'s stream ({n} of {} lines): `polyphony replay --agent {other} {}`",
                summary.lines,
                args.file.display()
            ),
            None => "no CLI Polyphony knows wrote it: give a saved .ndjson transcript \
                     (e.g. $POLYPHONY_HOME/transcripts/<task>/<attempt>.ndjson) and the CLI \
                     that wrote it in --agent"
                .to_string(),
        };
        return Err(super::UsageError::new(
            format!(
                "{} is not a {} transcript: none of its {} lines is that CLI's output",
                args.file.display(),
                args.agent,
                summary.lines
            ),
            fix,
        )
        .into());
    }
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
