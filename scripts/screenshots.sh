#!/usr/bin/env bash
# Regenerates the console screenshots in docs/ (shown in the README): a seeded home served
# by the real HTTP server, captured by headless Chromium at desktop (1280 px) and phone
# (420 px) width. Needs `chromium` (apt-get install -y chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v chromium >/dev/null || { echo "chromium is not installed: apt-get install -y chromium" >&2; exit 2; }
cargo run --quiet --example console_screens -- docs
