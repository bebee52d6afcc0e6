#!/usr/bin/env sh
# Debian packages the tests use as independent tools: postgresql (a real
# PostgreSQL server for the tests that run on it), poppler-utils (pdfsig,
# a second opinion on signatures), softhsm2 (a PKCS#11 token) and prometheus
# (a real Prometheus to scrape the stack, and promtool to test the alerts),
# npm (buf, the protos' linter and compatibility check, comes from npm),
# chromium (the console's browser tests drive it with Playwright),
# fontconfig with the DejaVu fonts (the fidelity harness rasterizes with them
# alone: bench/eval/fonts.conf), faketime (libfaketime skews one service's
# clock in the clock-skew tests: quire.testing.skewedclock) and iproute2
# (`ip netns`: the partition tests put each node of a cluster in a network
# namespace). Installed
# only when missing, and only where apt-get can run (root on Debian).
set -eu
need=""
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need="$need postgresql"
command -v pdfsig >/dev/null 2>&1 || need="$need poppler-utils"
command -v softhsm2-util >/dev/null 2>&1 || need="$need softhsm2"
command -v promtool >/dev/null 2>&1 || need="$need prometheus"
command -v npm >/dev/null 2>&1 || need="$need npm"
command -v fc-list >/dev/null 2>&1 || need="$need fontconfig"
command -v chromium >/dev/null 2>&1 || need="$need chromium"
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need="$need fonts-dejavu-core"
ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || need="$need faketime"
command -v ip >/dev/null 2>&1 || need="$need iproute2"
[ -z "$need" ] && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: install$need from your distribution to run every test (under CI, their tests fail)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q $need >/dev/null 2>&1; then
  if ! { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q $need >/dev/null 2>&1; }; then
    # Not fatal: the tests that need these tools say so and skip.
    echo "note: could not install$need; the tests that use them will be skipped" >&2
  fi
fi
