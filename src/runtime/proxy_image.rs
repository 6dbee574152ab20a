//! The egress proxy's image (issue 25, `egress::proxy`) `polyphony-egress:<build id>`: `FROM scratch`, the host's own
//! polyphony binary at `/polyphony` and the shared libraries `ldd` lists for it, nothing
//! else (no shell, no package manager). Built offline through the engine API; the tag is
//! the binary's GNU build id (a hash of the linked binary, read from its ELF notes
//! without reading the whole file), else a SHA-256 of it, so a build happens once per
//! binary and an unchanged binary never rebuilds.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Instant;

use bollard::Docker;
use sha2::{Digest, Sha256};

use super::RuntimeError;

/// Repository name of the proxy image.
pub const PROXY_IMAGE_REPO: &str = "polyphony-egress";
/// The label the image carries (`polyphony.image=egress-proxy`): an untagged one (the
/// engine untags an image when a rebuild takes its tag) is still found by it.
pub const PROXY_IMAGE_LABEL: (&str, &str) = ("polyphony.image", "egress-proxy");

const DOCKERFILE: &str =
    "# The egress proxy (src/egress/image.rs): the host's polyphony binary and its libraries.
FROM scratch
COPY rootfs/ /
LABEL polyphony.image=egress-proxy
USER 65534:65534
ENTRYPOINT [\"/polyphony\", \"egress-proxy\"]
";

/// glibc reads it for getaddrinfo: the container's /etc/hosts first, then DNS.
const NSSWITCH: &str = "hosts: files dns\n";

/// Where the host keeps its CA bundle (Debian, Fedora, Alpine/macOS spellings): copied into
/// the image so the model-API gateway can verify the provider's TLS certificate.
const CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// An egress proxy image on the engine: its id, its `polyphony-egress:<tag>` names (none
/// for one a rebuild left untagged), its size (`cleanup` removes those of other binaries).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ImageFact {
    pub id: String,
    pub tags: Vec<String>,
    pub bytes: u64,
}

impl ImageFact {
    /// Whether `tag` (`None`: no tag known) is one of this image's names.
    pub fn is(&self, tag: Option<&str>) -> bool {
        tag.is_some_and(|t| self.tags.iter().any(|own| own == t))
    }
}

/// The proxy image tag of the binary this process runs (`proxy_binary`), if it can be read.
pub fn current_tag() -> Option<String> {
    proxy_binary().and_then(|b| image_tag(&b)).ok()
}

/// The image tag for `binary`: `polyphony-egress:<16 hex>`.
pub fn image_tag(binary: &Path) -> Result<String, RuntimeError> {
    let id = match build_id(binary) {
        Some(id) => hex::encode(id),
        None => {
            let bytes = std::fs::read(binary).map_err(|e| read_error(binary, e))?;
            hex::encode(Sha256::digest(&bytes))
        }
    };
    Ok(format!("{PROXY_IMAGE_REPO}:{}", &id[..id.len().min(16)]))
}

fn read_error(path: &Path, e: std::io::Error) -> RuntimeError {
    RuntimeError::Build(format!(
        "cannot read the polyphony binary {} for the egress proxy image: {e}",
        path.display()
    ))
}

/// The GNU build id of an ELF64 little-endian binary, from its PT_NOTE segments.
pub fn build_id(path: &Path) -> Option<Vec<u8>> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut ehdr = [0u8; 64];
    file.read_exact(&mut ehdr).ok()?;
    if &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 || ehdr[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let phoff = u64_at(&ehdr, 0x20);
    let phentsize = u16_at(&ehdr, 0x36) as usize;
    let phnum = u16_at(&ehdr, 0x38) as usize;
    if phentsize < 56 || phnum > 256 {
        return None;
    }
    let mut phdrs = vec![0u8; phentsize * phnum];
    file.seek(SeekFrom::Start(phoff)).ok()?;
    file.read_exact(&mut phdrs).ok()?;
    for ph in phdrs.chunks(phentsize) {
        if u32_at(ph, 0) != 4 {
            continue; // not PT_NOTE
        }
        let (offset, size) = (u64_at(ph, 8), u64_at(ph, 0x20) as usize);
        if size > 1 << 16 {
            continue;
        }
        let mut notes = vec![0u8; size];
        file.seek(SeekFrom::Start(offset)).ok()?;
        file.read_exact(&mut notes).ok()?;
        let mut at = 0;
        while at + 12 <= notes.len() {
            let namesz = u32_at(&notes, at) as usize;
            let descsz = u32_at(&notes, at + 4) as usize;
            let typ = u32_at(&notes, at + 8);
            let name_at = at + 12;
            let desc_at = name_at + namesz.div_ceil(4) * 4;
            let end = desc_at + descsz.div_ceil(4) * 4;
            if desc_at + descsz > notes.len() {
                break;
            }
            if typ == 3 && &notes[name_at..name_at + namesz] == b"GNU\0" && descsz >= 8 {
                return Some(notes[desc_at..desc_at + descsz].to_vec());
            }
            at = end;
        }
    }
    None
}

/// The shared objects `ldd BINARY` lists (absolute paths, the loader included); none for
/// a static binary.
pub fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>, RuntimeError> {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| {
            RuntimeError::Build(format!("cannot run ldd for the egress proxy image: {e}"))
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // "not a dynamic executable": a static binary needs no libraries.
        return Ok(Vec::new());
    }
    Ok(parse_ldd(&text))
}

/// `ldd`'s lines (`libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)`,
/// `/lib64/ld-linux-x86-64.so.2 (0x…)`) to paths (pure).
pub fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.trim(),
            None => line,
        };
        let path = path.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') && !out.iter().any(|p: &PathBuf| p == Path::new(path)) {
            out.push(PathBuf::from(path));
        }
    }
    out
}

fn build_context(binary: &Path, libraries: &[PathBuf]) -> Result<Vec<u8>, RuntimeError> {
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
    add("Dockerfile", DOCKERFILE.as_bytes(), 0o644)?;
    add("rootfs/etc/nsswitch.conf", NSSWITCH.as_bytes(), 0o644)?;
    if let Some(bundle) = CA_BUNDLES.iter().find_map(|p| std::fs::read(p).ok()) {
        add("rootfs/etc/ssl/certs/ca-certificates.crt", &bundle, 0o644)?;
    }
    let bytes = std::fs::read(binary).map_err(|e| read_error(binary, e))?;
    add("rootfs/polyphony", &bytes, 0o755)?;
    for lib in libraries {
        // Read through symlinks: the image holds the file under the name the loader asks for.
        let data = std::fs::read(lib).map_err(|e| {
            RuntimeError::Build(format!("cannot read {} (ldd lists it): {e}", lib.display()))
        })?;
        add(&format!("rootfs{}", lib.display()), &data, 0o755)?;
    }
    tar.into_inner()
        .map_err(|e| RuntimeError::Build(format!("finishing the build context: {e}")))
}

/// Builds the proxy image for `binary` unless its tag exists; returns the tag.
pub async fn ensure_proxy_image(docker: &Docker, binary: &Path) -> Result<String, RuntimeError> {
    let tag = image_tag(binary)?;
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(tag);
    }
    let started = Instant::now();
    let libraries = shared_libraries(binary)?;
    let context = build_context(binary, &libraries)?;
    super::test_image::build_tagged(docker, &tag, context).await?;
    tracing::info!(tag = %tag, elapsed_ms = started.elapsed().as_millis() as u64, "built the egress proxy image");
    Ok(tag)
}

/// The polyphony binary the proxy image is made of: `POLYPHONY_BINARY` when set (tests
/// that drive the library from another executable), else this process's own executable.
pub fn proxy_binary() -> Result<PathBuf, RuntimeError> {
    if let Some(path) = std::env::var_os("POLYPHONY_BINARY").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    std::env::current_exe().map_err(|e| {
        RuntimeError::Build(format!(
            "cannot find this executable for the egress proxy image: {e}; set POLYPHONY_BINARY"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines_become_paths() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibgone.so => not found\n";
        assert_eq!(
            parse_ldd(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libz.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tnot a dynamic executable\n").is_empty());
    }

    #[test]
    fn this_test_binary_has_a_build_id_and_a_stable_tag() {
        let exe = std::env::current_exe().unwrap();
        let tag = image_tag(&exe).unwrap();
        assert!(tag.starts_with("polyphony-egress:"), "{tag}");
        assert_eq!(tag.len(), "polyphony-egress:".len() + 16);
        assert_eq!(tag, image_tag(&exe).unwrap());
        let not_elf = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(not_elf.path(), b"#!/bin/sh\n").unwrap();
        assert!(build_id(not_elf.path()).is_none());
        assert!(image_tag(not_elf.path())
            .unwrap()
            .starts_with("polyphony-egress:"));
    }
}
