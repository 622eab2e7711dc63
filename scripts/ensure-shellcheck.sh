#!/usr/bin/env bash
# The node scripts' test (tests/unit/test_shell_scripts.py) runs shellcheck: install Debian's
# package of that name when missing. Where it cannot be installed (no apt, not root, no such
# package) it exits non-zero with one line, and the test skips with that line.
set -uo pipefail

command -v shellcheck >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "shellcheck is not installed and cannot be here (Debian's shellcheck package needs apt-get as root)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
errors=$({ apt-get update -qq && apt-get install -y -qq shellcheck; } 2>&1 >/dev/null)
if ! command -v shellcheck >/dev/null 2>&1; then
    echo "shellcheck could not be installed with apt-get: $(printf '%s\n' "$errors" | grep -v '^N: ' | tail -n 1)" >&2
    exit 1
fi
