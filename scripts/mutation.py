#!/usr/bin/env python3
"""
Mutation testing of the deploy's wiring (docs/contributing.md, "Mutation testing"): does a test go
red when a stage stops making one of its calls? On a scratch copy of the checkout (the checkout
itself is never changed), each mutant runs only the unit tests that execute its line, as one run of
the plan tests under coverage (pytest-cov, one context per test) says.

    .venv/bin/python scripts/mutation.py calls             # each call statement of the stages removed
    .venv/bin/python scripts/mutation.py calls --safety    # the safety calls (tests/safety_calls.py)
    .venv/bin/python scripts/mutation.py mutmut --safety   # mutmut's mutants on the safety calls' lines
    .venv/bin/python scripts/mutation.py mutmut --minutes 240

``calls`` removes one statement at a time (a call whose value is dropped, a ``raise``) and, with
``--safety``, each safety call as tests/safety_calls.py names it; mutmut has no mutation that
removes a statement, hence this pass. ``mutmut`` runs mutmut 2 (``pip install .[mutation]``; mutmut
3 leaves every decorated function alone, and every stage is a pyinfra ``@deploy``) over
deploy/tasks/, deploy/stages.py and the entry files, bounded by ``--minutes``. Both print each
survivor and a score; neither is part of scripts/test (a full mutmut run takes hours on 2 cores).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

# What is mutated: the stages (pyinfra's @deploy tasks), the table that runs them and the entry files.
TARGETS = (
    "deploy/tasks",
    "deploy/stages.py",
    "deploy/entry.py",
    "deploy/cluster.py",
    "deploy/gpu_node.py",
    "deploy/verify.py",
    "deploy/undo.py",
    "deploy/pull.py",
    "deploy/k8s_gpu.py",
    "deploy/render_cluster.py",
)
# The tests whose coverage picks each mutant's tests: every unit test that runs a stage or a deploy
# file through tests/plan.py, and the safety calls' own tests.
TEST_SELECTION = "plan tests"
# A call of these only says something: removing it is no mutant worth a test.
SAYING = ("logger.", "host.log", "say(", "host.noop(")
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header"]


def plan_test_files() -> list[str]:
    """Unit test files that run stages through tests/plan.py, and those tests/safety_calls.py names."""
    from safety_calls import SAFETY_CALLS

    files = {
        str(path.relative_to(REPO))
        for path in sorted((REPO / "tests" / "unit").glob("test_*.py"))
        if "from plan import" in path.read_text(encoding="utf-8")
    }
    files |= {test.split("::")[0] for call in SAFETY_CALLS for test in call.tests}
    return sorted(files)


def target_files(root: Path) -> list[str]:
    found = []
    for target in TARGETS:
        path = root / target
        found += sorted(str(p.relative_to(root)) for p in path.glob("*.py")) if path.is_dir() else [target]
    return found


def scratch_copy() -> Path:
    """The checkout's files (tracked, and new ones git does not ignore) in a folder of their own; its
    .cache (the Debian releases tests download) shared."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    scratch = Path(tempfile.mkdtemp(prefix="gpu-node-mutation-"))
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (scratch / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, scratch / name)
    (REPO / ".cache").mkdir(exist_ok=True)
    (scratch / ".cache").symlink_to(REPO / ".cache")
    return scratch


def test_env() -> dict[str, str]:
    # A mutant may have the size and mtime second of the file before it: no bytecode to go stale.
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


# --- which tests run each line ------------------------------------------------------------------


@dataclass
class Coverage:
    """line -> the ids of the tests that run it, per file; the tests that failed unmutated."""

    lines: dict[str, dict[int, list[str]]]
    failing: list[str]

    def tests_for(self, path: str, lines) -> list[str]:
        """The tests that run any of ``lines`` of ``path``; for a line only an import runs (a
        module's table), every test that runs any line of the file."""
        by_line = self.lines.get(path, {})
        found = dict.fromkeys(test for line in lines for test in by_line.get(line, ()))
        if not found and any(line in by_line for line in lines):
            found = dict.fromkeys(test for tests in by_line.values() for test in tests)
        return [test for test in found if test not in self.failing]


def measure(scratch: Path, tests: list[str], earlier: Path | None = None) -> Coverage:
    """One run of ``tests`` under coverage in ``scratch``, each test its own context; or an ``earlier``
    run's (the scratch copy it kept, with --keep: the checkout unchanged since)."""
    measured_in = earlier or scratch
    if earlier is None:
        started = time.monotonic()
        subprocess.run(
            [
                *PYTEST[:3],
                *PYTEST[4:],
                "--cov=deploy",
                "--cov-context=test",
                "--cov-report=",
                f"--junitxml={scratch / 'mutation-baseline.xml'}",
                *tests,
            ],
            cwd=scratch,
            env=test_env(),
            stdout=subprocess.DEVNULL,
        )
        print(f"coverage of {len(tests)} test files: {time.monotonic() - started:.0f} s", flush=True)
    failing = failed_tests(measured_in / "mutation-baseline.xml")
    print(f"failing unmutated (left out): {', '.join(failing) or 'none'}", flush=True)
    from coverage import CoverageData

    data = CoverageData(basename=str(measured_in / ".coverage"))
    data.read()
    lines: dict[str, dict[int, list[str]]] = {}
    for measured in data.measured_files():
        path = str(Path(measured).resolve().relative_to(measured_in.resolve()))
        by_line = data.contexts_by_lineno(measured)
        lines[path] = {
            line: sorted({context.rsplit("|", 1)[0] for context in contexts if context})
            for line, contexts in by_line.items()
        }
    return Coverage(lines, failing)


def failed_tests(junit: Path) -> list[str]:
    import xml.etree.ElementTree as ElementTree

    failing = []
    for case in ElementTree.parse(junit).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            module = case.get("classname", "").replace(".", "/")
            failing.append(f"{module}.py::{case.get('name')}")
    return failing


def run_tests(scratch: Path, tests: list[str], timeout: float) -> str:
    """killed, survived (no test red) or timeout."""
    if not tests:
        return "survived"
    try:
        result = subprocess.run([*PYTEST, *tests], cwd=scratch, env=test_env(), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if result.returncode == 0 else "killed"


# --- calls: one statement removed at a time -------------------------------------------------------


@dataclass(frozen=True)
class Removal:
    path: str
    first: int  # the statement's lines, 1-based
    last: int
    text: str  # its source, as removed
    replacement: str = "pass"
    name: str = ""  # the safety call's, for --safety

    def apply(self, source: str) -> str:
        lines = source.splitlines(keepends=True)
        start = lines[self.first - 1]
        if self.replacement == "pass":
            indent = start[: len(start) - len(start.lstrip())]
            mutated = [*lines[: self.first - 1], f"{indent}pass\n", *lines[self.last :]]
            return "".join(mutated)
        assert source.count(self.text) == 1, f"{self.path}: {self.text!r} is not there once"
        return source.replace(self.text, self.replacement)


def statement_removals(root: Path, path: str) -> list[Removal]:
    """Every statement of ``path`` that calls something for its effect (a call whose value is dropped,
    not a log line) or raises."""
    source = (root / path).read_text(encoding="utf-8")
    removals = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
            text = ast.get_source_segment(source, node) or ""
            if not text.startswith(SAYING):
                removals.append(Removal(path, node.lineno, node.end_lineno or node.lineno, text))
    return sorted(removals, key=lambda removal: removal.first)


def held_by_named_tests(scratch: Path, removal: Removal, tests: tuple[str, ...], timeout: float) -> list[str]:
    """With ``removal`` applied, the named tests that stay green (each must go red: none stays)."""
    target = scratch / removal.path
    original = target.read_text(encoding="utf-8")
    mutated = removal.apply(original)
    compile(mutated, removal.path, "exec")
    report = scratch / "mutation-named.xml"
    target.write_text(mutated, encoding="utf-8")
    try:
        subprocess.run(
            [*PYTEST[:3], *PYTEST[4:], f"--junitxml={report}", *tests],
            cwd=scratch,
            env=test_env(),
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return []
    finally:
        target.write_text(original, encoding="utf-8")
    failing = failed_tests(report)
    return [test for test in tests if not any(failed == test or failed.startswith(test + "[") for failed in failing)]


def safety_removals(root: Path) -> list[Removal]:
    """Each safety call (tests/safety_calls.py): its statement removed, or its text replaced."""
    from safety_calls import SAFETY_CALLS

    removals = []
    for call in SAFETY_CALLS:
        source = (root / call.path).read_text(encoding="utf-8")
        assert source.count(call.text) == 1, f"{call.path}: {call.text!r} is not there once"
        if call.replacement is not None:
            line = source[: source.index(call.text)].count("\n") + 1
            removals.append(
                Removal(call.path, line, line + call.text.count("\n"), call.text, call.replacement, call.name)
            )
            continue
        offset = source.index(call.text)
        statement = innermost_statement(source, offset)
        removals.append(
            Removal(
                call.path,
                statement.lineno,
                statement.end_lineno or statement.lineno,
                ast.get_source_segment(source, statement) or "",
                name=call.name,
            )
        )
    return removals


def innermost_statement(source: str, offset: int) -> ast.stmt:
    line = source[:offset].count("\n") + 1
    found = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return min(found, key=lambda node: (node.end_lineno or node.lineno) - node.lineno)


def run_removals(scratch: Path, coverage: Coverage, removals: list[Removal], timeout: float) -> list[tuple]:
    results = []
    for removal in removals:
        target = scratch / removal.path
        original = target.read_text(encoding="utf-8")
        mutated = removal.apply(original)
        compile(mutated, removal.path, "exec")
        tests = coverage.tests_for(removal.path, range(removal.first, removal.last + 1))
        target.write_text(mutated, encoding="utf-8")
        try:
            outcome = run_tests(scratch, tests, timeout)
        finally:
            target.write_text(original, encoding="utf-8")
        shown = removal.name or " ".join(removal.text.split())[:100]
        print(f"{outcome:8} {removal.path}:{removal.first} ({len(tests)} tests) {shown}", flush=True)
        results.append((outcome, removal, len(tests)))
    return results


# --- mutmut -----------------------------------------------------------------------------------------

HOOK = '''\
"""mutmut's hook (written by scripts/mutation.py): each mutant runs the tests that run its line."""
import json
import shlex

_MAP = json.load(open("mutation-tests.json"))


def pre_mutation(context):
    line = context.current_line_index + 1
    allowed = _MAP["lines"].get(context.filename)
    if _MAP["only_listed"] and (allowed is None or line not in allowed):
        context.skip = True
        return
    # the tests named for the line first (they fail fast), then every test that runs it
    runs = [tests for tests in (_MAP["named"].get(context.filename, {}).get(str(line)),
                                _MAP["tests"].get(context.filename, {}).get(str(line))) if tests]
    # mutmut runs the command without a shell and counts only exit status 1 as killed: a test that
    # failed (1) or a module that no longer imports (2) is 1; tests not found (4, 5) are not a kill
    script = "".join(_MAP["pytest"] + " " + " ".join(shlex.quote(test) for test in tests)
                     + '; s=$?; [ $s -eq 0 ] || { [ $s -le 2 ] && exit 1; exit $s; }\\n' for tests in runs)
    context.config.test_command = "sh -c " + shlex.quote(script) if script else "true"
'''


def run_mutmut(
    scratch: Path,
    coverage: Coverage,
    files: list[str],
    only: dict[str, dict[int, tuple[str, ...]]] | None,
    minutes: float,
) -> None:
    """mutmut over ``files`` (``only``: the lines of each to mutate, with the tests named for them)."""
    tests = {
        path: {str(line): coverage.tests_for(path, [line]) for line in coverage.lines.get(path, {})} for path in files
    }
    named = {path: {str(line): list(extra) for line, extra in lines.items()} for path, lines in (only or {}).items()}
    (scratch / "mutation-tests.json").write_text(
        json.dumps(
            {
                "tests": tests,
                "named": named,
                "lines": {path: sorted(lines) for path, lines in (only or {}).items()},
                "only_listed": only is not None,
                "pytest": " ".join(shlex.quote(word) for word in PYTEST),
            }
        )
    )
    (scratch / "mutmut_config.py").write_text(HOOK)
    mutmut = Path(sys.executable).with_name("mutmut")
    # mutmut bounds each mutant's tests at 10 times its baseline's run: a baseline of one quick test that
    # lasts a minute bounds each mutant at ten (its own tests come from the hook).
    baseline = "sh -c " + shlex.quote(
        " ".join(shlex.quote(word) for word in [*PYTEST, "tests/unit/test_entry_points_help.py"]) + " && sleep 60"
    )
    command = [
        str(mutmut),
        "run",
        "--paths-to-mutate",
        ",".join(files),
        "--tests-dir",
        "tests/unit",
        "--runner",
        baseline,
        "--simple-output",
        "--no-progress",
        "--test-time-base",
        "300",
    ]
    started = time.monotonic()
    try:
        subprocess.run(command, cwd=scratch, env=test_env(), timeout=minutes * 60, stdout=subprocess.DEVNULL)
        bounded = ""
    except subprocess.TimeoutExpired:
        bounded = f" (stopped after {minutes:g} min: the rest untested)"
    print(f"mutmut: {(time.monotonic() - started) / 60:.0f} min{bounded}", flush=True)
    mutmut_results(scratch, mutmut)


def mutmut_results(scratch: Path, mutmut: Path) -> None:
    """The score from mutmut's cache, and each survivor's diff."""
    with sqlite3.connect(scratch / ".mutmut-cache") as database:
        rows = database.execute(
            "SELECT mutant.id, mutant.status, sourcefile.filename, line.line_number FROM mutant "
            "JOIN line ON mutant.line = line.id JOIN sourcefile ON line.sourcefile = sourcefile.id"
        ).fetchall()
    counts: dict[str, int] = {}
    for _, status, _, _ in rows:
        counts[status] = counts.get(status, 0) + 1
    # suspicious: killed, but slower than mutmut expects; a timeout is not counted as killed
    killed = counts.get("ok_killed", 0) + counts.get("ok_suspicious", 0)
    survived, timeout = counts.get("bad_survived", 0), counts.get("bad_timeout", 0)
    tested = killed + survived + timeout
    print(
        f"mutmut: {killed} killed, {survived} survived, {timeout} timed out of {tested} tested "
        f"({counts.get('skipped', 0)} skipped, {counts.get('untested', 0)} untested): "
        f"score {100 * killed / tested if tested else 0:.1f}%"
    )
    for mutant_id, status, filename, line in sorted(rows, key=lambda row: (row[2], row[3])):
        if status in ("bad_survived", "bad_timeout"):
            diff = subprocess.run(
                [str(mutmut), "show", str(mutant_id)], cwd=scratch, capture_output=True, text=True
            ).stdout
            changed = [text for text in diff.splitlines() if text[:1] in "+-" and text[:3] not in ("+++", "---")]
            print(
                f"{'survived' if status == 'bad_survived' else 'timeout '} {filename}:{line + 1} #{mutant_id}: "
                f"{' | '.join(changed)}"
            )


def safety_calls_held(scratch: Path, timeout: float) -> int:
    """Each safety call removed in turn: every test tests/safety_calls.py names for it must go red."""
    from safety_calls import SAFETY_CALLS

    unheld = 0
    for call, removal in zip(SAFETY_CALLS, safety_removals(scratch)):
        green = held_by_named_tests(scratch, removal, call.tests, timeout)
        unheld += bool(green)
        print(
            f"{'HELD' if not green else 'NOT HELD':8} {call.name} ({removal.path}:{removal.first})"
            + "".join(f"\n         stays green without it: {test}" for test in green),
            flush=True,
        )
    print(f"safety calls: {len(SAFETY_CALLS) - unheld} of {len(SAFETY_CALLS)} held by their tests")
    return 1 if unheld else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("mode", choices=("calls", "mutmut"))
    parser.add_argument(
        "--safety", action="store_true", help="only the safety calls of tests/safety_calls.py (their lines, for mutmut)"
    )
    parser.add_argument("--files", nargs="*", help="mutate these files only (default: the stages and entry files)")
    parser.add_argument("--minutes", type=float, default=60, help="mutmut's bound (default 60)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one mutant's tests may take")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copy (its path is printed)")
    parser.add_argument(
        "--coverage",
        type=Path,
        help="the scratch copy an earlier run kept (--keep): its coverage of the tests, for a checkout unchanged since",
    )
    args = parser.parse_args(argv)

    scratch = scratch_copy()
    print(f"scratch copy: {scratch}", flush=True)
    try:
        if args.mode == "calls" and args.safety:
            return safety_calls_held(scratch, args.timeout)
        files = args.files or target_files(scratch)
        coverage = measure(scratch, plan_test_files(), args.coverage)
        if args.mode == "calls":
            removals = [removal for path in files for removal in statement_removals(scratch, path)]
            results = run_removals(scratch, coverage, removals, args.timeout)
            survivors = [result for result in results if result[0] == "survived"]
            print(
                f"calls: {len(results) - len(survivors)} of {len(results)} removals went red "
                f"({len(survivors)} survived)"
            )
            return 0
        only = None
        if args.safety:
            from safety_calls import SAFETY_CALLS

            only = {}
            for call, removal in zip(SAFETY_CALLS, safety_removals(scratch)):
                for line in range(removal.first, removal.last + 1):
                    only.setdefault(removal.path, {})[line] = call.tests
            files = sorted(only)
        run_mutmut(scratch, coverage, files, only, args.minutes)
        return 0
    finally:
        if args.keep:
            print(f"kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
