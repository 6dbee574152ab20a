//! The offline test image `polyphony-test` (images/test/): `FROM scratch`, the host's
//! static busybox, the worker image's credential-staging entrypoint
//! (`images/worker/entrypoint.sh`, the one copy) and one fake CLI per agent type
//! (`/usr/local/bin/<id>` for every [`AgentType`]: a wrapper around the shared
//! `fake/polyphony-fake.sh`, which speaks each CLI's real stream format). Built through bollard with a tar
//! context, because no registry is reachable (DESIGN "Images").
//!
//! The image files are compiled into the binary (`include_str!`), so tests and the demo
//! need no source tree; the tag carries a hash of them, so an edit means a rebuild and an
//! unchanged image is never rebuilt.

use std::path::Path;
use std::time::Instant;

use bollard::query_parameters::{BuildImageOptionsBuilder, TagImageOptionsBuilder};
use bollard::Docker;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::RuntimeError;
use crate::domain::AgentType;

/// Repository name of the test image.
pub const TEST_IMAGE_REPO: &str = "polyphony-test";
/// Where the static busybox comes from (Debian `busybox-static`).
pub const HOST_BUSYBOX: &str = "/bin/busybox";

const DOCKERFILE: &str = include_str!("../../images/test/Dockerfile");
/// The worker image's entrypoint, the one file both images run (put into this image's
/// context as `entrypoint.sh`).
const ENTRYPOINT: &str = include_str!("../../images/worker/entrypoint.sh");
const FAKE_LIB: &str = include_str!("../../images/test/fake/polyphony-fake.sh");

/// The fake CLI `id`: sets `AGENT` and runs the shared body.
fn fake_wrapper(id: &str) -> String {
    format!(
        "#!/bin/sh\n# Fake `{id}` CLI for Polyphony tests: see images/test/README.md.\nAGENT={id}\n. /usr/local/bin/polyphony-fake.sh\nfake_main \"$@\"\n"
    )
}

/// The context files other than busybox: (path in the context, content, mode).
fn context_files() -> Vec<(String, String, u32)> {
    let mut files = vec![
        ("Dockerfile".to_string(), DOCKERFILE.to_string(), 0o644),
        ("entrypoint.sh".into(), ENTRYPOINT.into(), 0o755),
        ("fake/polyphony-fake.sh".into(), FAKE_LIB.into(), 0o644),
    ];
    for t in AgentType::ALL {
        files.push((format!("fake/{t}"), fake_wrapper(t.as_str()), 0o755));
    }
    files
}

/// `polyphony-test:<hash of the context>` (busybox included).
fn content_tag(busybox: &[u8]) -> String {
    let mut h = Sha256::new();
    for (path, content, mode) in context_files() {
        h.update(path.as_bytes());
        h.update(mode.to_le_bytes());
        h.update((content.len() as u64).to_le_bytes());
        h.update(content.as_bytes());
    }
    h.update(busybox);
    format!("{TEST_IMAGE_REPO}:{}", hex::encode(&h.finalize()[..6]))
}

fn build_context(busybox: &[u8]) -> Result<Vec<u8>, RuntimeError> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8], mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_cksum();
        tar.append_data(&mut header, path, data)
            .map_err(|e| RuntimeError::Build(format!("packing {path} into the build context: {e}")))
    };
    add("busybox", busybox, 0o755)?;
    for (path, content, mode) in context_files() {
        add(&path, content.as_bytes(), mode)?;
    }
    tar.into_inner()
        .map_err(|e| RuntimeError::Build(format!("finishing the build context: {e}")))
}

/// Builds the test image unless its content tag already exists; also tags it `:latest`.
/// Returns the content tag. Needs `/bin/busybox` from Debian's `busybox-static`.
pub async fn ensure_test_image(docker: &Docker) -> Result<String, RuntimeError> {
    let busybox = std::fs::read(HOST_BUSYBOX).map_err(|e| {
        RuntimeError::Build(format!(
            "cannot read {HOST_BUSYBOX} ({e}); the offline test image needs a static busybox: \
             `apt-get install busybox-static`"
        ))
    })?;
    let tag = content_tag(&busybox);
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(tag);
    }
    let started = Instant::now();
    let context = build_context(&busybox)?;
    build_tagged(docker, &tag, context).await?;
    let (repo, version) = tag.split_once(':').unwrap_or((TEST_IMAGE_REPO, "latest"));
    let latest = TagImageOptionsBuilder::default()
        .repo(repo)
        .tag("latest")
        .build();
    docker
        .tag_image(&tag, Some(latest))
        .await
        .map_err(|e| RuntimeError::Build(format!("tagging {tag} as latest: {e}")))?;
    tracing::info!(tag = %tag, version, elapsed_ms = started.elapsed().as_millis() as u64, "built the test image");
    Ok(tag)
}

/// Builds the image of the tar `context` (its `Dockerfile`) as `tag`, through the engine
/// API with no registry. Shared with the egress proxy's image (`proxy_image`).
pub(crate) async fn build_tagged(
    docker: &Docker,
    tag: &str,
    context: Vec<u8>,
) -> Result<(), RuntimeError> {
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .build();
    let mut progress = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    let mut log = String::new();
    while let Some(item) = progress.next().await {
        let info = item.map_err(|e| RuntimeError::Build(format!("{e}; build output:\n{log}")))?;
        if let Some(detail) = info.error_detail {
            return Err(RuntimeError::Build(format!(
                "{}; build output:\n{log}",
                detail.message.unwrap_or_default()
            )));
        }
        if let Some(s) = info.stream {
            log.push_str(&s);
        }
    }
    Ok(())
}

/// True when `path` is the host busybox this module needs (for `doctor`).
pub fn host_busybox_present() -> bool {
    Path::new(HOST_BUSYBOX).is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_changes_with_content() {
        let a = content_tag(b"one");
        let b = content_tag(b"two");
        assert!(a.starts_with("polyphony-test:"));
        assert_ne!(a, b);
        assert_eq!(a, content_tag(b"one"));
    }

    #[test]
    fn context_holds_every_file() {
        let tar = build_context(b"bb").unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"busybox".to_string()));
        assert!(names.contains(&"fake/claude".to_string()));
        assert!(names.contains(&"fake/kimi".to_string()));
        assert_eq!(names.len(), 4 + AgentType::ALL.len());
    }
}
