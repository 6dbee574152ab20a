//! `polyphony completions SHELL` and `polyphony man`: shell completion scripts and a man
//! page generated from the same clap definition the binary parses with (clap_complete,
//! clap_mangen), so they never drift from the real flags.

use clap::CommandFactory as _;

use super::{Cli, Context, Outcome};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell to write a completion script for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

pub fn run(args: Args, _ctx: &Context) -> anyhow::Result<Outcome> {
    let mut cmd = Cli::command();
    let mut out = std::io::stdout().lock();
    clap_complete::generate(args.shell, &mut cmd, "polyphony", &mut out);
    Ok(Outcome::Success)
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {}

/// Writes the man page (section 1, roff) of `polyphony` and every verb to stdout: the
/// top-level page, then one `SUBCOMMAND` page per verb with its EXAMPLES and EXIT STATUS.
pub fn man(_args: ManArgs, _ctx: &Context) -> anyhow::Result<Outcome> {
    use std::io::Write as _;
    let cmd = Cli::command();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    render(&cmd, &mut out)?;
    out.flush()?;
    Ok(Outcome::Success)
}

/// The whole manual as one roff document: the top page (NAME, SYNOPSIS, DESCRIPTION,
/// OPTIONS, SUBCOMMANDS, EXAMPLES), then one section per verb with its description, its
/// options and its EXAMPLES and EXIT STATUS.
pub fn render(cmd: &clap::Command, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(cmd.clone()).render(out)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("polyphony {}", sub.get_name());
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        let page = clap_mangen::Man::new(sub.clone().name(leaked).bin_name(leaked));
        let mut body = Vec::new();
        page.render_description_section(&mut body)?;
        page.render_options_section(&mut body)?;
        page.render_extra_section(&mut body)?;
        writeln!(out, ".SH \"{}\"", name.to_uppercase())?;
        for line in String::from_utf8_lossy(&body).lines() {
            // The verb's sections become subsections of its own section.
            match line {
                ".SH DESCRIPTION" => {}
                // A new paragraph, so EXAMPLES does not run on from the last option.
                ".SH EXTRA" => writeln!(out, ".PP")?,
                l if l.starts_with(".SH ") => writeln!(out, ".SS {}", &l[4..])?,
                l => writeln!(out, "{l}")?,
            }
        }
    }
    Ok(())
}
