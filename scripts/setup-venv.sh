#!/usr/bin/env bash
# Create .venv with the project's dependencies and test extras; reinstall only when
# pyproject.toml changed. Sourced by scripts/demo and scripts/test.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$repo/.venv"
python=${PYTHON:-python3}

if ! "$python" -m venv --help >/dev/null 2>&1 || ! "$python" -c 'import ensurepip' >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"

stamp="$venv/.gpu-node-installed"
wanted=$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$venv/bin/python" -m pip install -q "$repo[test]"
    echo "$wanted" >"$stamp"
fi
