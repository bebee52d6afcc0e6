#!/usr/bin/env sh
# Installs buf, the protobuf linter and wire-compatibility checker that
# `make protos-lint` (and so `make test`) runs, from npm into .venv/buf: local
# to this checkout, removed by `make clean`, kept out of git with .venv/.
# Pinned, so that every machine lints and compares by the same rules; skipped
# when the pinned version is already there. Needs Node.js (node and npm).
set -eu
BUF_VERSION=1.75.0
prefix="${VENV:-.venv}/buf"
buf="$prefix/node_modules/.bin/buf"
if [ -x "$buf" ] && [ "$("$buf" --version 2>/dev/null)" = "$BUF_VERSION" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "error: buf is installed from npm (@bufbuild/buf@$BUF_VERSION); install Node.js and npm, then run tools/install-buf.sh" >&2
  exit 1
fi
npm install --prefix "$prefix" --no-save --no-audit --no-fund --loglevel=error "@bufbuild/buf@$BUF_VERSION" >&2
installed="$("$buf" --version)"
if [ "$installed" != "$BUF_VERSION" ]; then
  echo "error: $buf reports version $installed, expected $BUF_VERSION" >&2
  exit 1
fi
echo "installed buf $BUF_VERSION at $buf" >&2
