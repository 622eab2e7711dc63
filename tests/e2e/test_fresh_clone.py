"""
The README's main command on a plain clone, as a new user runs it: ``git clone`` into an empty
folder with nothing beside it (no ``shared/``, no ``GPU_NODE_LAB``, no ``GPU_NODE_CORPUS``), then
``./scripts/demo`` exactly as the README writes it.

The clone sets itself up (its own virtualenv from PyPI, Debian's packages), provisions a throwaway
node container with Debian's real ``nvidia-driver``, the toolkit from the STAND-IN repository (no
registry ships NVIDIA's), wires containerd, verifies, runs again without a change and prints the
report. What is cloned is the committed HEAD: CI runs on a fresh clone of it.
"""

from __future__ import annotations

import os
import re

from harness import REPO, run

SETTINGS_FROM_OUTSIDE = ("GPU_NODE_LAB", "GPU_NODE_CORPUS", "GPU_NODES", "CONTROL_PLANE", "VIRTUAL_ENV")


def test_a_plain_clone_with_nothing_beside_it_runs_the_readme_main_command_end_to_end_with_the_standin_toolkit(
    image, tmp_path
):
    clone = tmp_path / "gpu-node"
    run(["git", "clone", "--quiet", str(REPO), str(clone)])
    assert [path.name for path in tmp_path.iterdir()] == ["gpu-node"], "nothing may stand beside the clone"
    readme = (clone / "README.md").read_text()
    assert re.search(r"^\./scripts/demo\b", readme, re.M), "the README's main command is ./scripts/demo"

    env = {key: value for key, value in os.environ.items() if key not in SETTINGS_FROM_OUTSIDE}
    demo = run(["./scripts/demo"], cwd=clone, env=env, check=False, timeout=2700)
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output[-8000:]

    toolkit_lines = [line for line in output.splitlines() if line.startswith("==> Toolkit: ")]
    assert len(toolkit_lines) == 1, toolkit_lines
    assert "STAND-IN NVIDIA Container Toolkit 1.20.0-1: no package registry ships the toolkit" in toolkit_lines[0]
    assert "==> The second run changed nothing" in output, output[-8000:]
    # The node as the demo shows it: Debian's driver installed and held, the toolkit installed, containerd up.
    packages = output.rpartition("--- packages")[2]
    assert re.search(r"^nvidia-driver \S+ hold ok installed$", packages, re.M), packages
    assert re.search(r"^nvidia-container-toolkit 1\.20\.0-1 install ok installed$", packages, re.M), packages
    held = packages.partition("--- held")[2].partition("--- containerd")[0].split()
    assert "nvidia-driver" in held, held
    assert packages.rpartition("--- containerd")[2].split()[0] == "active"
    # verify's report and the fleet report, from the second run: the node OK (no GPU here) and converged.
    second = output.rpartition("==> The same run again")[2]
    assert re.search(r"^@docker/\w+: OK  GPUs: none  .*toolkit: 1\.20\.0  runtime: containerd ", second, re.M), second
    assert re.search(r"^  runtime_binary +pass ", second, re.M) and re.search(r"^  containerd_config +pass ", second, re.M)
    assert "--> Fleet report: 1 node: 1 converged" in second, second
    assert "==> Node removed" in output
