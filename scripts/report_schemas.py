"""
Write deploy/schemas/*.schema.json, the node, fleet and health reports' formats as JSON Schema, from
their models (deploy/reports/formats.py's NodeReportFormat, FleetReportFormat and HealthReportFormat): the
models are the source, the files what the package ships for other tools to read.

    .venv/bin/python scripts/report_schemas.py           # rewrite the files
    .venv/bin/python scripts/report_schemas.py --check   # exit 1 when one is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from deploy.reports.formats import FleetReportFormat, HealthReportFormat, NodeReportFormat, schema_text  # noqa: E402

SCHEMAS = {
    REPO / "deploy" / "schemas" / "node-report.schema.json": NodeReportFormat,
    REPO / "deploy" / "schemas" / "fleet-report.schema.json": FleetReportFormat,
    REPO / "deploy" / "schemas" / "health-report.schema.json": HealthReportFormat,
}
COMMAND = ".venv/bin/python scripts/report_schemas.py"


def stale() -> list[Path]:
    """The schema files whose text is not their model's."""
    return [
        path
        for path, model in SCHEMAS.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != schema_text(model)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write deploy/schemas/*.schema.json from the report formats' models.")
    parser.add_argument("--check", action="store_true", help="change nothing: exit 1 when a file is out of date")
    args = parser.parse_args(argv)
    for path in stale():
        if args.check:
            print(f"{path.relative_to(REPO)} is out of date: run {COMMAND}", file=sys.stderr)
        else:
            path.write_text(schema_text(SCHEMAS[path]), encoding="utf-8")
    return 1 if args.check and stale() else 0


if __name__ == "__main__":
    sys.exit(main())
