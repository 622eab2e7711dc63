#!/usr/bin/env bash
# Usage: ensure-debian-package.sh PACKAGE — install Debian's PACKAGE (whose command has the same
# name) when the command is missing, for the tests that need it: chromium for the fleet report
# page's test, shellcheck for the node scripts' test. Where it cannot be installed (no apt, not
# root, no such package) it exits non-zero with one line, and the test skips with that line.
set -uo pipefail

package=${1:?usage: ensure-debian-package.sh PACKAGE}
command -v "$package" >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "$package is not installed and cannot be here (Debian's $package package needs apt-get as root)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
errors=$({ apt-get update -qq && apt-get install -y -qq "$package"; } 2>&1 >/dev/null)
if ! command -v "$package" >/dev/null 2>&1; then
    echo "$package could not be installed with apt-get: $(printf '%s\n' "$errors" | grep -v '^N: ' | tail -n 1)" >&2
    exit 1
fi
