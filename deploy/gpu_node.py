"""
Turn every host into a Kubernetes GPU node:

    pyinfra inventory.py deploy/gpu_node.py
"""

import sys
from pathlib import Path

# pyinfra executes this file rather than importing it: make the `deploy` package
# importable whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyinfra import host  # noqa: E402

from deploy.entry import gpu_node_settings  # noqa: E402
from deploy.operations.failure import HostRefusal, fail  # noqa: E402
from deploy.tasks.driver import driver_report, nvidia_driver  # noqa: E402
from deploy.tasks import kernel as kernel_stage  # noqa: E402
from deploy.tasks import containerd as containerd_stage  # noqa: E402
from deploy.tasks import toolkit as toolkit_stage  # noqa: E402
from deploy.tasks.kernel import kernel_prerequisites  # noqa: E402
from deploy.tasks.preflight import preflight  # noqa: E402
from deploy.tasks.containerd import containerd_runtime  # noqa: E402
from deploy.tasks.docker import docker_runtime  # noqa: E402
from deploy.tasks.drain import checked_drain_target, uncordon_drained_node  # noqa: E402
from deploy.tasks.toolkit import toolkit  # noqa: E402
from deploy.tasks.verify import verify  # noqa: E402

node = None
settings = gpu_node_settings(host)
if settings is not None:
    # The facts the kernel and toolkit stages decide on, read in preflight's one command.
    read_ahead = []
    if settings.runs("kernel"):
        read_ahead += kernel_stage.reads(settings)
    if settings.runs("toolkit") and settings.nvidia_toolkit_install:
        read_ahead += toolkit_stage.reads(settings)
    if settings.runs("runtimes") and settings.wires("containerd"):
        read_ahead += containerd_stage.reads(settings)
    try:
        node = preflight(settings, read_ahead=read_ahead)
    except HostRefusal as refusal:
        # This host alone fails, before any change on it; the rest of the fleet goes on.
        fail(name="Refuse this host (preflight)", message=str(refusal))
if node is not None:
    # drain_before_restart: the node to drain before a restart; its control plane checked now.
    drain = checked_drain_target(settings)
    if settings.runs("kernel"):
        kernel_prerequisites(settings, node.platform)
    if settings.runs("driver") and settings.nvidia_driver_install:
        nvidia_driver(settings, node.platform, node.driver_plan, drain=drain)
    if settings.runs("toolkit") and settings.nvidia_toolkit_install:
        toolkit(settings, node.platform)
    if settings.runs("runtimes") and settings.wires("containerd"):
        containerd_runtime(settings, node.platform.family, node.containerd, drain=drain,
                           pending_restarts=node.pending_restarts)
    if settings.runs("runtimes") and settings.wires("docker"):
        docker_runtime(settings, node.platform.family, drain=drain, pending_restarts=node.pending_restarts)
    if settings.runs("verify"):
        verify(settings)
    if drain:
        # After verify, which fails the host first when a step fails: the node then stays
        # cordoned. Without verify, after the restarted runtime came back active.
        uncordon_drained_node(drain)

    # Last, so it ends the run's output: no GPU, reboot required.
    driver_report(settings, node.driver_plan)
