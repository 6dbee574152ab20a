//! The Docker side of the tests: whether there is an engine (without one a test prints
//! `SKIPPED: <why>` and returns, but fails when `CI` is set), the offline test image built
//! once per test binary, and a home's containers found and removed by its
//! `polyphony.home` label.

use std::process::Command;
use std::time::Instant;

use polyphony::runtime::{ensure_test_image, DockerRuntime};
use tokio::sync::OnceCell;

static IMAGE: OnceCell<String> = OnceCell::const_new();

/// The engine, or `None` after printing SKIPPED (a panic under CI).
pub async fn engine() -> Option<DockerRuntime> {
    match DockerRuntime::connect().await {
        Ok(rt) => Some(rt),
        Err(e) => {
            if std::env::var_os("CI").is_some() {
                panic!("Docker is required under CI: {e}");
            }
            println!("SKIPPED: no Docker engine ({e})");
            None
        }
    }
}

/// The offline test image's tag, built (or found current) once per test binary.
pub async fn image(rt: &DockerRuntime) -> String {
    IMAGE
        .get_or_init(|| async {
            let started = Instant::now();
            let tag = ensure_test_image(rt.client())
                .await
                .unwrap_or_else(|e| panic!("building the test image: {e}"));
            println!("test image {tag} ready in {:?}", started.elapsed());
            tag
        })
        .await
        .clone()
}

/// The test image's tag, or `None` after printing SKIPPED (a panic under CI).
pub async fn test_image() -> Option<String> {
    let rt = engine().await?;
    Some(image(&rt).await)
}

/// Full ids of the containers (any state) labelled for the home `label`, narrowed by an
/// extra `docker ps` filter unless `filter` is empty.
pub fn containers_of(label: &str, filter: &str) -> Vec<String> {
    let mut cmd = Command::new("docker");
    cmd.args([
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("label=polyphony.home={label}"),
    ]);
    if !filter.is_empty() {
        cmd.args(["--filter", filter]);
    }
    let out = cmd.output().expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Removes (forcibly) every container labelled for the home `label`: what a test's home
/// does when dropped, also after a panic. Errors are ignored; there is nothing left to do.
pub fn remove_containers_of(label: &str) {
    let ids = containers_of(label, "");
    if !ids.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f"])
            .args(&ids)
            .output();
    }
}

/// The networks labelled for the home `label` (its attempts' egress networks).
pub fn networks_of(label: &str) -> std::io::Result<Vec<String>> {
    let out = Command::new("docker")
        .args([
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("label=polyphony.home={label}"),
        ])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// Removes the networks labelled for the home `label` (an attempt's egress network), after
/// their containers.
pub fn remove_networks_of(label: &str) {
    remove_containers_of(label);
    let ids = networks_of(label).unwrap_or_default();
    if !ids.is_empty() {
        let _ = Command::new("docker")
            .args(["network", "rm"])
            .args(&ids)
            .output();
    }
}

/// What a test makes under the home label it holds (agent and proxy containers, egress
/// networks), removed when dropped: on every path, a panic before the test's own
/// `egress_down` included.
pub struct LabelGuard(pub String);

impl Drop for LabelGuard {
    fn drop(&mut self) {
        remove_networks_of(&self.0);
    }
}

/// An image tag this test made from another image, removed again when dropped.
pub struct TagGuard(String);

impl TagGuard {
    pub fn create(image: &str, tag: &str) -> TagGuard {
        let out = Command::new("docker")
            .args(["tag", image, tag])
            .output()
            .expect("docker tag");
        assert!(
            out.status.success(),
            "docker tag: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        TagGuard(tag.to_string())
    }
}

impl Drop for TagGuard {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", &self.0]).output();
    }
}
