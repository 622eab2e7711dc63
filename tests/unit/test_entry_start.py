"""The entry files' shared start (deploy/entry.py): what they imported is frozen once per process."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

from deploy import stages

REPO = Path(__file__).resolve().parents[2]

# Run in a process of its own: freezing is for the whole interpreter, and this test's own would
# keep the test session's objects.
FREEZE_TWICE = """
import gc, weakref
from deploy.entry import freeze_imported_objects
import deploy.stages
before = gc.get_freeze_count()
freeze_imported_objects()
frozen = gc.get_freeze_count()

class Node:
    pass

later = Node()
later.self = later  # a cycle only the collector frees
gone = weakref.ref(later)
del later
freeze_imported_objects()
again = gc.get_freeze_count()
gc.collect()
print(before, frozen, again, gone() is None)
"""


def test_the_imports_are_frozen_once_and_what_the_run_makes_later_is_still_collected():
    result = subprocess.run([sys.executable, "-c", FREEZE_TWICE], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    before, frozen, again, collected = result.stdout.split()
    assert int(before) == 0
    # pyinfra's, pydantic's and the deploy's objects: tens of thousands
    assert int(frozen) > 10_000
    # a second host's start freezes nothing more, and a cycle made after the first is freed
    assert (int(again), collected) == (int(frozen), "True")


# pyinfra's CLI turns bytecode writing off for the whole process before it executes an entry file.
BYTECODE = """
import sys
sys.dont_write_bytecode = {setting}
import deploy
after_import = sys.dont_write_bytecode
deploy.load(".foundations.batches")
print(after_import, sys.dont_write_bytecode)
"""


def test_importing_the_package_leaves_the_interpreters_bytecode_setting_alone(tmp_path):
    """A library does not change its host's global state: the package's import leaves
    sys.dont_write_bytecode as it was, whichever it was, and so does load()."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    for setting in (True, False):
        result = subprocess.run(
            [sys.executable, "-c", BYTECODE.format(setting=setting)],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**env, "PYTHONPYCACHEPREFIX": str(tmp_path)},
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [str(setting), str(setting)]


def test_the_modules_an_entry_file_loads_keep_their_bytecode_under_pyinfras_setting(tmp_path):
    """deploy.load(), as the entry files import the package's modules: written though the process
    says not to write bytecode (pyinfra's CLI), unless PYTHONDONTWRITEBYTECODE asks it."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    for extra, written in (({}, True), ({"PYTHONDONTWRITEBYTECODE": "1"}, False)):
        cache = tmp_path / str(written)
        result = subprocess.run(
            [sys.executable, "-c", BYTECODE.format(setting=True)],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**env, **extra, "PYTHONPYCACHEPREFIX": str(cache)},
        )
        assert result.returncode == 0, result.stderr
        assert bool(list(cache.rglob("batches.*.pyc"))) is written


# The entry's imports, then a host's steps asked for their reads as preflight asks them.
STAGE_MODULES = """
import sys
import deploy.entry
from deploy.settings import parse_settings
from deploy.stages import steps_for

def tasks():
    return sorted(name for name in sys.modules if name.startswith("deploy.tasks."))

at_start = tasks()
settings = parse_settings({{"stages": "{stages}"}})
for step in steps_for(settings):
    step.reads(settings)
print(" ".join(at_start), "|", " ".join(tasks()))
"""


def test_a_run_imports_the_modules_of_the_stages_it_runs_and_no_other_stages():
    """deploy/stages.py's table names each stage's module (deploy/tasks/) by name until the run calls a
    function of it: the entry file's import loads none of them, and a host that runs the kernel stage
    alone loads the kernel's, not the driver's, the runtimes' or the undo's (docs/benchmark.md)."""
    result = subprocess.run(
        [sys.executable, "-c", STAGE_MODULES.format(stages="kernel")], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    at_start, after_reads = (part.split() for part in result.stdout.split("|"))
    # preflight's own and the drain's (every run asks for its target), the entry's
    assert at_start == ["deploy.tasks.drain", "deploy.tasks.preflight"]
    assert "deploy.tasks.kernel" in after_reads
    others = ("driver", "imex", "mig", "toolkit", "containerd", "docker", "cdi", "dra", "verification", "undo")
    assert not [name for name in after_reads if name.rsplit(".", 1)[1] in others]


def test_every_function_the_stage_table_names_is_a_function_of_the_stages_module():
    """deploy/stages.py's table names a stage module's function before the module is imported, and any
    name passes until it is called; the type checker reads the real modules, but would also take a constant
    (the run would get a function in its place). Each ``module.name`` the table's source uses is checked here
    against the module itself."""
    stage_modules = {name for name, value in vars(stages).items() if isinstance(value, stages._StageModule)}
    named = {
        (node.value.id, node.attr)
        for node in ast.walk(ast.parse(Path(stages.__file__).read_text()))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in stage_modules
    }
    assert {module for module, _ in named} == stage_modules
    not_functions = [
        f"{module}.{name}"
        for module, name in sorted(named)
        if not inspect.isfunction(getattr(importlib.import_module(f"deploy.tasks.{module}"), name, None))
    ]
    assert not_functions == []


# A no-op re-run's imports (bench/noop.py's stages): the entry's, then each step's reads as preflight asks them.
NOOP_MODULES = """
import sys
import deploy.entry
from deploy.settings import parse_settings
from deploy.stages import steps_for

settings = parse_settings({"stages": "kernel,toolkit,runtimes,verify"})
for step in steps_for(settings):
    step.reads(settings)
print(" ".join(sorted(name for name in sys.modules if name.startswith("deploy."))))
"""


def test_a_run_that_installs_the_node_programs_does_not_import_them():
    """The first-boot and health stages write their programs' settings files and name their paths: the
    files' shapes and paths live in deploy/node/boot_settings.py and deploy/health/settings.py, which the
    programs import too, so a run (bench/noop.py's no-op) does not import the programs themselves
    (deploy/node/first_boot.py, deploy/health/check.py and the health check's modules)."""
    result = subprocess.run([sys.executable, "-c", NOOP_MODULES], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    # the two stages ran their reads, which write both programs' settings
    assert {"deploy.tasks.boot", "deploy.tasks.health"} <= loaded
    programs = ("deploy.node.first_boot", "deploy.health.check", "deploy.health.readings", "deploy.health.problems")
    assert [name for name in programs if name in loaded] == []


def test_a_run_without_the_racks_settings_imports_the_racks_values_and_not_its_domains():
    """The settings check an IMEX address and a MIG layout with deploy/rack/values.py: a run that sets
    neither (bench/noop.py's no-op) does not import the rack's IMEX and MIG modules, nor the driver
    reload's holders mig.py reads."""
    result = subprocess.run([sys.executable, "-c", NOOP_MODULES], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    assert "deploy.settings.values" in loaded
    assert [name for name in ("deploy.rack.imex", "deploy.rack.mig", "deploy.driver.reload") if name in loaded] == []
