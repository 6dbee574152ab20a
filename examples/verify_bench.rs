//! Host-side verification benchmark (issue 23, docs/benchmarks.md "Host-side verification").
//!
//! For a change of 1, 1,000 and 20,000 new files on a base of `BENCH_BASE_FILES` (default
//! 2,000) tracked files, in `BENCH_REPS` (default 3) interleaved repetitions, times:
//! 1. polyphony's host-side verification of a prepared workspace: the landing commit from
//!    the working tree in the orchestrator's own repository (`commit_once`), the change list
//!    with sizes (`changes`), every changed blob read once for the gates (`read_blobs`,
//!    one batched `cat-file`), and the clean checkout for a check (`checkout`);
//! 2. `git add -A` + `git commit` of the same files in a scratch clone.
//!
//! Prints a Markdown table of medians and the ratio. Run it through `bench/host_verify.sh`.

use polyphony::workspace::{Author, PrepareRequest, WorkspaceManager};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@example.invalid",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn write_files(root: &Path, n: usize, tag: &str) -> anyhow::Result<()> {
    let dir = root.join("new");
    std::fs::create_dir_all(&dir)?;
    for i in 0..n {
        std::fs::write(
            dir.join(format!("f{i:05}.txt")),
            format!("{tag} file {i}\n"),
        )?;
    }
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let reps: usize = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let base_files: usize = std::env::var("BENCH_BASE_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let tmp = tempfile::tempdir()?;
    let work = tmp.path().join("work");
    std::fs::create_dir_all(work.join("src"))?;
    for i in 0..base_files {
        std::fs::write(
            work.join("src").join(format!("m{i:05}.rs")),
            format!("pub fn f{i}() {{}}\n").repeat(20),
        )?;
    }
    git(&work, &["init", "-q"])?;
    git(&work, &["add", "-A"])?;
    git(&work, &["commit", "-qm", "base"])?;
    git(tmp.path(), &["clone", "-q", "--bare", "work", "origin.git"])?;
    let origin = tmp.path().join("origin.git");
    let manager = WorkspaceManager::new(tmp.path().join("ws"), tmp.path().join("mirrors"));
    let author = Author {
        name: "Polyphony".into(),
        email: "p@example.invalid".into(),
    };
    println!("| changed files | polyphony host-side verification | of which the commit | `git add -A` + `git commit` | ratio |");
    println!("|---:|---:|---:|---:|---:|");
    let mut attempt = 0u32;
    for n in [1usize, 1000, 20_000] {
        let (mut ours, mut commit, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..reps {
            attempt += 1;
            let ws = manager.prepare(&PrepareRequest {
                repo: origin.display().to_string(),
                task_id: "bench".into(),
                attempt,
                base_ref: None,
                branch: format!("polyphony/bench-a{attempt}"),
                token: None,
                owner: None,
            })?;
            write_files(&ws.path, n, "ours")?;
            let started = Instant::now();
            let out = manager.commit_once(
                &ws,
                &author,
                "bench",
                polyphony::workspace::DEFAULT_MAX_CHANGED_FILES,
            )?;
            let committed = started.elapsed();
            let sha = out.sha.expect("a change");
            let changes = manager.changes(&ws, &sha)?;
            let oids = changes.iter().map(|c| c.new_oid.clone()).collect();
            let mut bytes = 0usize;
            manager.read_blobs(&ws, oids, &mut |_, b| {
                bytes += b.len();
                true
            })?;
            let dest = tmp.path().join(format!("check-{attempt}"));
            manager.checkout(&ws, &sha, &dest, None)?;
            ours.push(started.elapsed());
            commit.push(committed);
            anyhow::ensure!(changes.len() == n && bytes > 0);
            manager.remove(&ws.path)?;
            std::fs::remove_dir_all(&dest)?;

            let scratch = tmp.path().join(format!("scratch-{n}-{rep}"));
            git(
                tmp.path(),
                &[
                    "clone",
                    "-q",
                    &origin.display().to_string(),
                    &scratch.display().to_string(),
                ],
            )?;
            write_files(&scratch, n, "ours")?;
            let started = Instant::now();
            git(&scratch, &["add", "-A"])?;
            git(&scratch, &["commit", "-qm", "bench"])?;
            theirs.push(started.elapsed());
            std::fs::remove_dir_all(&scratch)?;
        }
        let (o, c, t) = (median(ours), median(commit), median(theirs));
        println!(
            "| {n} | {:.0} ms | {:.0} ms | {:.0} ms | {:.2}× |",
            o.as_secs_f64() * 1e3,
            c.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e3,
            o.as_secs_f64() / t.as_secs_f64()
        );
    }
    Ok(())
}
