//! Records the commit the binary is built from, for `polyphony --version` (issue 29).
//! Outside a git checkout (a source tarball) the version names no commit.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=POLYPHONY_COMMIT");
    let commit = std::env::var("POLYPHONY_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_default();
    // Rebuild when HEAD moves: the HEAD file and the ref it names (loose or packed).
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(reference);
    }
    for path in watch {
        if let Some(file) = git(&["rev-parse", "--git-path", &path]) {
            if std::path::Path::new(&file).exists() {
                println!("cargo:rerun-if-changed={file}");
            }
        }
    }
    println!("cargo:rustc-env=POLYPHONY_COMMIT={commit}");
}
