//! Clone-per-attempt benchmark (issue 4, docs/benchmarks.md "Clone per attempt").
//!
//! Generates (once, cached) a repository with `BENCH_COMMITS` commits (default 5000) over a
//! tree of ~2,000 source files with `git fast-import`, serves it as a bare upstream over
//! `file://` (the pack transport, as for a network remote), warms polyphony's mirror, then runs
//! `BENCH_REPS` (default 7) interleaved repetitions of:
//! 1. `WorkspaceManager::prepare` (lock + mirror fetch + reference clone + dissociate + branch),
//! 2. `git clone --reference MIRROR --dissociate URL DIR`,
//! 3. `git clone URL DIR`,
//!
//! and prints a Markdown table of medians. Run it through `bench/clone.sh`, which also records
//! the figures in docs/benchmarks.md.

use polyphony::workspace::{PrepareRequest, WorkspaceManager};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let reps: usize = env_or("BENCH_REPS", 7)?;
    let commits: usize = env_or("BENCH_COMMITS", 5000)?;
    let dir =
        PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/polyphony-bench".into()));
    std::fs::create_dir_all(&dir)?;
    let upstream = dir.join(format!("upstream-{commits}.git"));
    if !upstream.join("polyphony-bench-complete").exists() {
        eprintln!("generating {commits} commits in {} ...", upstream.display());
        let t = Instant::now();
        generate(&upstream, commits)?;
        eprintln!("generated in {:.1}s", t.elapsed().as_secs_f64());
    }
    let url = format!("file://{}", upstream.display());
    let runs = dir.join("runs");
    let _ = std::fs::remove_dir_all(&runs);
    let mgr = WorkspaceManager::new(runs.join("ws"), dir.join("mirrors"));
    let request = |attempt: u32| PrepareRequest {
        repo: url.clone(),
        task_id: "bench".into(),
        attempt,
        base_ref: None,
        branch: format!("polyphony/bench-a{attempt}"),
        token: None,
        owner: None,
    };
    // Warm the mirror (created on the first run, fetched afterwards).
    let ws = mgr.prepare(&request(1))?;
    anyhow::ensure!(ws.used_mirror, "mirror not used: {:?}", ws.mirror_note);
    mgr.remove(&ws.path)?;
    let mirror = mgr.mirror_path(&url)?;

    let (mut ours, mut reference, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..reps {
        // Rotate the order so page-cache effects do not favour one contender.
        for slot in 0..3 {
            match (i + slot) % 3 {
                0 => {
                    let t = Instant::now();
                    let ws = mgr.prepare(&request(i as u32 + 2))?;
                    ours.push(t.elapsed());
                    anyhow::ensure!(ws.used_mirror, "mirror not used: {:?}", ws.mirror_note);
                    mgr.remove(&ws.path)?;
                }
                1 => {
                    let target = runs.join(format!("ref-{i}"));
                    reference.push(git_clone(
                        &["--reference", &mirror.display().to_string(), "--dissociate"],
                        &url,
                        &target,
                    )?);
                    std::fs::remove_dir_all(&target)?;
                }
                _ => {
                    let target = runs.join(format!("plain-{i}"));
                    plain.push(git_clone(&[], &url, &target)?);
                    std::fs::remove_dir_all(&target)?;
                }
            }
        }
        eprintln!(
            "rep {}: polyphony {:.3}s, reference {:.3}s, plain {:.3}s",
            i + 1,
            ours[i].as_secs_f64(),
            reference[i].as_secs_f64(),
            plain[i].as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&runs);

    let (m_ours, m_ref, m_plain) = (
        median(&mut ours),
        median(&mut reference),
        median(&mut plain),
    );
    let ratio = m_ours.as_secs_f64() / m_ref.as_secs_f64();
    let stats = repo_stats(&upstream)?;
    println!(
        "Repository: {stats}; upstream served over `file://`; {reps} repetitions, interleaved."
    );
    println!();
    println!("| Clone per attempt | median | vs reference clone |");
    println!("|---|---|---|");
    println!(
        "| polyphony `WorkspaceManager::prepare` (fetch mirror + reference clone + dissociate + branch) | {:.3} s | {:.2}x |",
        m_ours.as_secs_f64(),
        ratio
    );
    println!(
        "| `git clone --reference MIRROR --dissociate` | {:.3} s | 1.00x |",
        m_ref.as_secs_f64()
    );
    println!(
        "| `git clone` (no mirror) | {:.3} s | {:.2}x |",
        m_plain.as_secs_f64(),
        m_plain.as_secs_f64() / m_ref.as_secs_f64()
    );
    println!();
    println!(
        "All runs (s): polyphony {}; reference {}; plain {}.",
        list(&ours),
        list(&reference),
        list(&plain)
    );
    println!();
    println!(
        "Target (DESIGN.md): within 1.2x of the reference clone: **{}** ({ratio:.2}x).",
        if ratio <= 1.2 { "met" } else { "NOT met" }
    );
    Ok(())
}

fn env_or(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => Ok(v.parse()?),
        Err(_) => Ok(default),
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn list(v: &[Duration]) -> String {
    v.iter()
        .map(|d| format!("{:.3}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn git() -> Command {
    let mut c = Command::new("git");
    c.env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0");
    c
}

fn git_clone(extra: &[&str], url: &str, target: &Path) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let out = git()
        .args(["clone", "--quiet"])
        .args(extra)
        .arg(url)
        .arg(target)
        .output()?;
    let elapsed = t.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "git clone failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(elapsed)
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output()?;
    anyhow::ensure!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn repo_stats(upstream: &Path) -> anyhow::Result<String> {
    let commits = run(git()
        .arg("--git-dir")
        .arg(upstream)
        .args(["rev-list", "--count", "--all"]))?;
    let files =
        run(git()
            .arg("--git-dir")
            .arg(upstream)
            .args(["ls-tree", "-r", "--name-only", "HEAD"]))?
        .lines()
        .count();
    let size = run(git()
        .arg("--git-dir")
        .arg(upstream)
        .args(["count-objects", "-v", "-H"]))?;
    let pack = size
        .lines()
        .find_map(|l| l.strip_prefix("size-pack: "))
        .unwrap_or("?")
        .to_string();
    Ok(format!(
        "{commits} commits, {files} files at HEAD, pack {pack}"
    ))
}

/// xorshift64*: deterministic, so every machine benchmarks the same repository.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const WORDS: &[&str] = &[
    "let", "value", "config", "result", "match", "state", "return", "error", "buffer", "index",
    "count", "handle", "request", "response", "worker", "task", "queue", "mirror", "branch",
    "commit", "option", "vector", "string", "parse", "render", "update", "delete", "insert",
];

fn line(rng: &mut Rng) -> String {
    let indent = "    ".repeat(rng.below(3));
    let n = 3 + rng.below(8);
    let words: Vec<&str> = (0..n).map(|_| WORDS[rng.below(WORDS.len())]).collect();
    format!(
        "{indent}{} = {}({});",
        words[0],
        words[1],
        words[2..].join(", ")
    )
}

/// Writes a fast-import stream: an initial tree of 40 modules x 50 files of ~60 lines, then
/// commits touching 1-4 files each (edits, inserts), a new file every 10 commits, a tag every
/// 500 commits.
fn generate(upstream: &Path, commits: usize) -> anyhow::Result<()> {
    let _ = std::fs::remove_dir_all(upstream);
    run(git()
        .args(["init", "--bare", "--quiet", "-b", "main"])
        .arg(upstream))?;
    let mut child = git()
        .arg("--git-dir")
        .arg(upstream)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
    let mut out = std::io::BufWriter::new(stdin);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut files: Vec<(String, Vec<String>)> = Vec::new();
    for m in 0..40 {
        for f in 0..50 {
            let lines = (0..40 + rng.below(40)).map(|_| line(&mut rng)).collect();
            files.push((
                format!("src/module{m:02}/part{}/file{f:02}.rs", f % 5),
                lines,
            ));
        }
    }
    let mut ts: u64 = 1_600_000_000;
    for c in 0..commits {
        let touched: Vec<usize> = if c == 0 {
            (0..files.len()).collect()
        } else {
            let mut t: Vec<usize> = (0..1 + rng.below(4))
                .map(|_| rng.below(files.len()))
                .collect();
            if c % 10 == 0 {
                let lines = (0..20 + rng.below(40)).map(|_| line(&mut rng)).collect();
                files.push((format!("src/added/c{c:05}.rs"), lines));
                t.push(files.len() - 1);
            }
            for &i in &t {
                let body = &mut files[i].1;
                for _ in 0..1 + rng.below(5) {
                    let at = rng.below(body.len());
                    let new_line = line(&mut rng);
                    if rng.below(3) == 0 {
                        body.insert(at, new_line);
                    } else {
                        body[at] = new_line;
                    }
                }
            }
            t
        };
        ts += 600 + rng.below(7200) as u64;
        let msg = format!("change {c}: update {} files\n", touched.len());
        writeln!(out, "commit refs/heads/main")?;
        writeln!(
            out,
            "author Dev {} <dev{}@example.com> {ts} +0000",
            c % 7,
            c % 7
        )?;
        writeln!(
            out,
            "committer Dev {} <dev{}@example.com> {ts} +0000",
            c % 7,
            c % 7
        )?;
        writeln!(out, "data {}\n{msg}", msg.len())?;
        for &i in &touched {
            let (path, body) = &files[i];
            let content = body.join("\n") + "\n";
            writeln!(
                out,
                "M 100644 inline {path}\ndata {}\n{content}",
                content.len()
            )?;
        }
        writeln!(out)?;
        if c > 0 && c % 500 == 0 {
            writeln!(out, "reset refs/tags/v{}\nfrom refs/heads/main\n", c / 500)?;
        }
    }
    out.flush()?;
    drop(out);
    anyhow::ensure!(child.wait()?.success(), "git fast-import failed");
    // Deltified packs, like a hosted repository serves.
    run(git()
        .arg("--git-dir")
        .arg(upstream)
        .args(["repack", "-a", "-d", "-f", "--quiet"]))?;
    std::fs::write(upstream.join("polyphony-bench-complete"), "")?;
    Ok(())
}
