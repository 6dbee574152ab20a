//! Clone-per-attempt benchmark (issues 4 and 18, docs/benchmarks.md "Clone per attempt").
//!
//! Generates (once, cached) a repository with `BENCH_COMMITS` commits (default 20,000) over a
//! tree of ~2,000 source files plus eight 100 KiB binary assets rewritten every 20 commits
//! (a pack over 100 MiB, a checkout of a few MiB) with `git fast-import`, serves it as a bare
//! upstream over `file://` (the pack transport, as for a network remote), warms polyphony's
//! mirror, then runs `BENCH_REPS` (default 7) interleaved repetitions of:
//! 1. `WorkspaceManager::prepare` with `CloneMode::Shared` (lock + mirror fetch + shared clone
//!    + checkout + branch),
//! 2. the same with `CloneMode::Dissociate` (reference clone + dissociate),
//! 3. `git clone --reference MIRROR --dissociate URL DIR`,
//! 4. `git clone URL DIR`,
//!
//! measuring wall time and the bytes each attempt allocates (`.git` and the whole directory),
//! and prints a Markdown table of medians. Run it through `bench/clone.sh`, which also records
//! the figures in docs/benchmarks.md.

use polyphony::workspace::{CloneMode, PrepareRequest, WorkspaceManager};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let reps: usize = env_or("BENCH_REPS", 7)?;
    let commits: usize = env_or("BENCH_COMMITS", 20_000)?;
    let dir =
        PathBuf::from(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp/polyphony-bench".into()));
    std::fs::create_dir_all(&dir)?;
    let upstream = dir.join(format!("upstream-{commits}-assets.git"));
    if !upstream.join("polyphony-bench-complete").exists() {
        eprintln!("generating {commits} commits in {} ...", upstream.display());
        let t = Instant::now();
        generate(&upstream, commits)?;
        eprintln!("generated in {:.1}s", t.elapsed().as_secs_f64());
    }
    let url = format!("file://{}", upstream.display());
    let runs = dir.join("runs");
    let _ = std::fs::remove_dir_all(&runs);
    let shared = WorkspaceManager::new(runs.join("ws"), dir.join("mirrors"))
        .with_clone_mode(CloneMode::Shared);
    let dissociate = WorkspaceManager::new(runs.join("ws"), dir.join("mirrors"))
        .with_clone_mode(CloneMode::Dissociate);
    let request = |task: &str, attempt: u32| PrepareRequest {
        repo: url.clone(),
        task_id: task.into(),
        attempt,
        base_ref: None,
        branch: format!("polyphony/{task}-a{attempt}"),
        token: None,
        owner: None,
    };
    // Warm the mirror (created on the first run, fetched afterwards).
    let ws = shared.prepare(&request("warm", 1))?;
    anyhow::ensure!(ws.used_mirror, "mirror not used: {:?}", ws.mirror_note);
    shared.remove(&ws.path)?;
    let mirror = shared.mirror_path(&url)?;

    let names = [
        "polyphony `prepare`, `clone_mode: shared` (fetch mirror + shared clone + checkout + branch)",
        "polyphony `prepare`, `clone_mode: dissociate` (fetch mirror + reference clone + dissociate + branch)",
        "`git clone --reference MIRROR --dissociate`",
        "`git clone` (no mirror)",
    ];
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); names.len()];
    for i in 0..reps {
        // Rotate the order so page-cache effects do not favour one contender.
        for slot in 0..names.len() {
            let which = (i + slot) % names.len();
            let attempt = i as u32 + 2;
            let sample = match which {
                0 | 1 => {
                    let mgr = if which == 0 { &shared } else { &dissociate };
                    let t = Instant::now();
                    let ws = mgr.prepare(&request(&format!("c{which}"), attempt))?;
                    let time = t.elapsed();
                    anyhow::ensure!(ws.used_mirror, "mirror not used: {:?}", ws.mirror_note);
                    let sample = Sample::measure(time, &ws.path);
                    mgr.remove(&ws.path)?;
                    sample
                }
                2 => {
                    let target = runs.join(format!("ref-{i}"));
                    let time = git_clone(
                        &["--reference", &mirror.display().to_string(), "--dissociate"],
                        &url,
                        &target,
                    )?;
                    let sample = Sample::measure(time, &target);
                    std::fs::remove_dir_all(&target)?;
                    sample
                }
                _ => {
                    let target = runs.join(format!("plain-{i}"));
                    let time = git_clone(&[], &url, &target)?;
                    let sample = Sample::measure(time, &target);
                    std::fs::remove_dir_all(&target)?;
                    sample
                }
            };
            samples[which].push(sample);
        }
        eprintln!(
            "rep {}: {}",
            i + 1,
            samples
                .iter()
                .map(|s| format!("{:.3}s", s[i].time.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = std::fs::remove_dir_all(&runs);

    let med: Vec<Sample> = samples.iter().map(|s| Sample::median(s)).collect();
    let reference = &med[2];
    let stats = repo_stats(&upstream)?;
    println!(
        "Repository: {stats}; mirror {} on disk (shared by every attempt); upstream served over `file://`; {reps} repetitions, interleaved.",
        mib(polyphony::workspace::disk_usage(&mirror))
    );
    println!();
    println!("| Clone per attempt | time (median) | vs reference clone | `.git` per attempt | whole attempt dir | `.git` vs reference |");
    println!("|---|---|---|---|---|---|");
    for (name, m) in names.iter().zip(&med) {
        println!(
            "| {name} | {:.3} s | {:.2}x | {} | {} | {:.1}x less |",
            m.time.as_secs_f64(),
            m.time.as_secs_f64() / reference.time.as_secs_f64(),
            mib(m.git_bytes),
            mib(m.total_bytes),
            reference.git_bytes as f64 / m.git_bytes.max(1) as f64,
        );
    }
    println!();
    for (name, s) in ["shared", "dissociate", "reference", "plain"]
        .iter()
        .zip(&samples)
    {
        println!(
            "All runs, {name} (s): {}.",
            s.iter()
                .map(|x| format!("{:.3}", x.time.as_secs_f64()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!();
    }
    let speedup = reference.time.as_secs_f64() / med[0].time.as_secs_f64();
    let disk = reference.git_bytes as f64 / med[0].git_bytes.max(1) as f64;
    let total = reference.total_bytes as f64 / med[0].total_bytes.max(1) as f64;
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    println!(
        "Targets (issue 18), `clone_mode: shared` against the git CLI's reference clone: at least 2x faster: **{}** ({speedup:.1}x); at least 20x less disk per attempt (`.git`, the objects an attempt stores): **{}** ({disk:.0}x). The whole attempt directory, checkout included (the same files in every mode), is {total:.1}x smaller.",
        verdict(speedup >= 2.0),
        verdict(disk >= 20.0),
    );
    let diss = med[1].time.as_secs_f64() / reference.time.as_secs_f64();
    println!();
    println!(
        "Target (DESIGN.md), `clone_mode: dissociate` within 1.2x of the reference clone: **{}** ({diss:.2}x).",
        verdict(diss <= 1.2)
    );
    Ok(())
}

/// One attempt: wall time and allocated bytes.
#[derive(Debug, Clone)]
struct Sample {
    time: Duration,
    git_bytes: u64,
    total_bytes: u64,
}

impl Sample {
    fn measure(time: Duration, dir: &Path) -> Sample {
        Sample {
            time,
            git_bytes: polyphony::workspace::disk_usage(&dir.join(".git")),
            total_bytes: polyphony::workspace::disk_usage(dir),
        }
    }

    /// Median of each figure on its own.
    fn median(v: &[Sample]) -> Sample {
        let mid = |mut x: Vec<u64>| {
            x.sort_unstable();
            x[x.len() / 2]
        };
        Sample {
            time: Duration::from_nanos(mid(v.iter().map(|s| s.time.as_nanos() as u64).collect())),
            git_bytes: mid(v.iter().map(|s| s.git_bytes).collect()),
            total_bytes: mid(v.iter().map(|s| s.total_bytes).collect()),
        }
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.2} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn env_or(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => Ok(v.parse()?),
        Err(_) => Ok(default),
    }
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

/// Size of each generated binary asset (incompressible).
const ASSET_BYTES: usize = 100 * 1024;

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
        // A binary asset rewritten every 20 commits: history that dwarfs the tree, as in
        // long-lived repositories (what issue 18 is about), without inflating the checkout.
        let asset = (c > 0 && c % 20 == 0).then(|| {
            let bytes: Vec<u8> = (0..ASSET_BYTES / 8)
                .flat_map(|_| rng.next().to_le_bytes())
                .collect();
            (format!("assets/blob{}.bin", (c / 20) % 8), bytes)
        });
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
        if let Some((path, bytes)) = &asset {
            writeln!(out, "M 100644 inline {path}\ndata {}", bytes.len())?;
            out.write_all(bytes)?;
            writeln!(out)?;
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
