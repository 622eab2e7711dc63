"""
gpu-node as a pyinfra package, from outside the repository: the wheel built from this checkout,
installed with its dependencies (PyPI's wheels, fetched once: tests/wheels.py) into a fresh
virtualenv in an empty folder, with no index, imported as
``gpu_node`` by a site's own deploy file that sits beside the site's own ``deploy/`` package (the name
the checkout's folder has), and run by that virtualenv's pyinfra against a real node container; the
operator's commands (pyproject.toml's [project.scripts]) installed beside it, each answering --help.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from harness import SAFE_DATA, DeployResult, assert_no_change, run
from wheels import dependency_wheels, gpu_node_wheel

# README and docs/drain-and-rollout.md, docs/without-controller.md name them
COMMANDS = ("gpu-node-rollout", "gpu-node-drift", "gpu-node-fleet-report", "gpu-node-pull-install")

SITE_DEPLOY = """\
# A site's own deploy file: its own package named deploy, and gpu-node's from the wheel.
from deploy.web import PORT

from gpu_node import provision_gpu_node

assert PORT == 8080
provision_gpu_node(stages=["kernel", "runtimes"], container_runtimes=["containerd"], {settings})
"""


@pytest.fixture(scope="module")
def site_with_the_wheel(tmp_path_factory) -> tuple[Path, Path]:
    """(the site's folder, its virtualenv's python): the wheel built, installed in an empty folder
    (once for this file's tests)."""
    site = tmp_path_factory.mktemp("package") / "site"
    wheel, dependencies = gpu_node_wheel(), dependency_wheels()
    (site / "deploy").mkdir(parents=True)
    (site / "deploy" / "__init__.py").write_text("")
    (site / "deploy" / "web.py").write_text("PORT = 8080\n")
    run([sys.executable, "-m", "venv", str(site / ".venv")])
    python = site / ".venv" / "bin" / "python"
    run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(dependencies), str(wheel)],
        timeout=900,
    )
    return site, python


def test_the_wheel_installs_the_operators_commands_and_each_prints_its_help(site_with_the_wheel):
    """Each command of [project.scripts] is in the virtualenv's bin and prints its usage under its own
    name, exit 0. Run with no PATH but the virtualenv's bin: a command that ignored --help and reached
    for the system (sh, systemctl) would fail here instead of acting on this machine."""
    site, python = site_with_the_wheel
    installed = run(
        [
            str(python),
            "-c",
            "from importlib.metadata import distribution; print(*sorted("
            "entry.name for entry in distribution('gpu-node').entry_points if entry.group == 'console_scripts'))",
        ],
        cwd=site,
    ).stdout.split()
    assert installed == sorted(COMMANDS)
    bin_folder = python.parent
    env = {"PATH": str(bin_folder), "LANG": "C.UTF-8"}
    wrong = []
    for command in COMMANDS:
        result = run([str(bin_folder / command), "--help"], check=False, cwd=site, env=env, timeout=120)
        if result.returncode != 0 or not result.stdout.startswith(f"usage: {command} ") or result.stderr:
            wrong.append(f"{command} --help: exit {result.returncode}\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    assert wrong == [], "\n".join(wrong)


def test_the_wheel_runs_from_a_sites_own_deploy_beside_its_own_deploy_package_and_a_rerun_changes_nothing(
    node, site_with_the_wheel
):
    site, python = site_with_the_wheel
    # Installed, not the checkout: the package imports from the virtualenv, whatever the folder.
    where = run(
        [str(python), "-c", "import gpu_node, deploy.web; print(gpu_node.__file__, gpu_node.__version__)"], cwd=site
    ).stdout
    assert where.startswith(str(site / ".venv")) and "gpu_node/__init__.py" in where, where
    settings = ", ".join(f"{key}={value == 'true'!r}" for key, value in SAFE_DATA.items())
    (site / "site_deploy.py").write_text(SITE_DEPLOY.format(settings=settings))
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "GPU_NODES")}

    def deploy() -> DeployResult:
        args = [str(python), "-m", "pyinfra", "-y", "--json", node.target, "site_deploy.py"]
        result = run(args, check=False, cwd=site, env=env, timeout=1500)
        return DeployResult(result.returncode, result.stdout, result.stderr, args)

    first = deploy()
    assert first.returncode == 0, first.explain()
    changed = first.changed_operations()
    assert changed and all(name.startswith("GPU node | ") for name in changed), changed  # run inside the deploy
    assert node.sh("containerd config dump").stdout.count('default_runtime_name = "nvidia"') == 1
    assert_no_change(deploy())
