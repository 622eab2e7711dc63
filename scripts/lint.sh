#!/usr/bin/env bash
# The static checks scripts/test runs before pytest: the layers of deploy/ and no import cycles (lint-imports),
# ruff's lint and format of every Python file, deploy/'s types (mypy, strict). Settings: pyproject.toml's
# [tool.importlinter], [tool.ruff] and [tool.mypy]. With --fix, ruff's safe fixes (the import order among them)
# and its format are applied, not checked: after a merge, `bash scripts/lint.sh --fix`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${GPU_NODE_VENV:-.venv}/bin
if [ "${1:-}" = --fix ]; then
    "$bin/ruff" check --fix .
    "$bin/ruff" format .
else
    "$bin/ruff" check .
    "$bin/ruff" format --check .
fi
"$bin/lint-imports" --no-cache
"$bin/mypy"
