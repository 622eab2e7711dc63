"""
The verify stage's operation (read-only): verify the node. It reads the facts and runs the probes
(deploy/operations/probes.py: containers started through crictl, ctr and docker) at execution time, after the
earlier stages ran, turns them into verify's steps (deploy/verification/) and records the node's
report. It yields no command when every step holds (pyinfra reports "No changes"), so a re-run of
the whole deploy stays change-free; a failing step makes the host fail after its report line.
"""

from __future__ import annotations

import uuid
from typing import Any

from pyinfra import host, logger
from pyinfra.api import operation

from ..driver.signing import key_paths
from ..facts.base import UnreadableOutput
from ..facts.containerd import ContainerdInstallations, config_read
from ..facts.cuda import CudaInit
from ..facts.module_signing import ModuleSigningState
from ..facts.nvidia import NodeSurvey
from ..facts.read_ahead import FactCall, known_fact, read_together
from ..facts.verification import Executables, VerifyReadout
from ..foundations.pyinfra_api import Commands
from ..reports.node_report import FAIL, PASS, SKIP, verify_report_store
from ..runtimes import registry
from ..runtimes.containerd.installations import ConfigTarget, classify_installation, config_target, plain_target
from ..runtimes.registry import CONTAINERD, CRI
from ..runtimes.wiring import HANDLER
from ..verification.cdi import cri_cdi_probe
from ..verification.options import VerifyOptions
from ..verification.readout import configured_binaries, gpu_usable, prepared
from ..verification.steps import all_steps, node_record
from ..verification.toolkit_runtimes import planned_runs
from . import cdi as cdi_ops
from . import devices, probes
from .driver import awaits_reboot
from .failure import failing_command
from .kernel_modules import KERNELS_READ

# The node's PCI GPUs, modules and versions (preflight reads it too): verify's first steps.
NODE_READ: FactCall = (NodeSurvey, {})
# cuInit through the driver's libcuda: read with the rest, it adds no remote command.
CUDA_READ: FactCall = (CudaInit, {})


def signing_read(options: VerifyOptions) -> FactCall:
    """Who signed the NVIDIA modules, and the signing key's state (the driver stage reads the same)."""
    key, cert = key_paths(options.signing_key, options.signing_cert)
    return (ModuleSigningState, {"key": key, "cert": cert})


def containerd_in_effect(options: VerifyOptions) -> ConfigTarget:
    """The containerd the node's installation runs (plain, k3s, rke2, k0s, microk8s): its binary, unit,
    socket and the config it runs with. Preflight's reading when nothing changed since, else read."""
    if CONTAINERD.name not in options.runtimes:
        return containerd_of(options, None)
    return containerd_of(options, known_fact(host, ContainerdInstallations))


def containerd_of(options: VerifyOptions, found: dict[str, Any] | None) -> ConfigTarget:
    """The containerd a node with this ContainerdInstallations reading runs (None: not asked, containerd
    is not wired)."""
    if found is None:
        return plain_target(options.containerd_config_path)
    return config_target(options.containerd_config_path, {**found, "installation": classify_installation(found)})


def verify_read(options: VerifyOptions, containerd: ConfigTarget) -> FactCall:
    """What verify reads of a node whose containerd is ``containerd`` (preflight reads it ahead
    for a plain containerd with the same call)."""
    values = {
        "containerd_binary": containerd.binary,
        "containerd_service": containerd.service or "",
        "containerd_socket": containerd.socket,
    }
    return (
        VerifyReadout,
        {"image": options.image, "binaries": (options.wiring.binary,), "runtime_values": {CONTAINERD.name: values}},
    )


def containerd_config_read(containerd: ConfigTarget) -> FactCall:
    """containerd's version and its ``config dump`` of the config it runs with: for a plain
    containerd, the very call the runtimes stage makes, so one read serves both."""
    return config_read(containerd.config_in_effect, None, containerd.binary)


def with_containerd_config(readout: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Verify's readout with containerd's version and dump from its ContainerdConfig reading
    (a failed dump: what it printed, as verify names the failure by it)."""
    failed = config["dump_exit_code"] not in (0, None)
    return {
        **readout,
        CONTAINERD.name: {
            **readout[CONTAINERD.name],
            "version": config["version"],
            "major": config["major"],
            "minor": config["minor"],
            "dump_exit_code": config["dump_exit_code"],
            "dump": config["dump_error"] if failed else config["dump"],
        },
    }


def reads(options: VerifyOptions) -> list[FactCall]:
    """The reads preflight makes ahead for this operation: the installation's, verify's of a plain
    containerd (a node of another installation reads verify's again, for its own containerd) and
    cuInit's."""
    plain = containerd_of(options, None)
    return [
        (ContainerdInstallations, {}),
        NODE_READ,
        verify_read(options, plain),
        containerd_config_read(plain),
        CUDA_READ,
        cdi_ops.state_read(),
        devices.links_read(options.driver_root),
        KERNELS_READ,
        signing_read(options),
    ]


def gpu_runs(
    readout: dict[str, Any], options: VerifyOptions, plan: dict[str, str | None], token: str
) -> dict[str, dict[str, Any]]:
    """Each runtime's planned GPU runs done, by their probes (deploy/runtimes/registry.py GpuRun)."""
    runs: dict[str, dict[str, Any]] = {}
    for runtime in registry.RUNTIMES:
        reading = readout[runtime.name]
        for run in runtime.runs:
            if plan[run.name] is not None:
                continue
            if run.probe == CRI:
                runs[run.name] = probes.run(
                    host,
                    probes.CrictlRun,
                    uid=token,
                    handler=HANDLER,
                    image=options.image if gpu_usable(readout) else None,
                    systemd_cgroup=options.wiring.systemd_cgroup,
                    socket=reading["socket"],
                    cdi=cri_cdi_probe(readout, options),
                )
            elif run.command is not None:
                runs[run.name] = probes.run(
                    host, probes.ContainerRun, run=run.command(reading, options.image, f"gpu-node-verify-{token}")
                )
    return runs


@operation()
def check_node(options: VerifyOptions, report_path: str, driver_packages: tuple[str, ...] = ()) -> Commands:
    """
    Run verify's steps on this host, record it for the report, and change nothing: no command is
    yielded unless a step failed, and then only one that fails the host, except on a GPU node
    awaiting the reboot its driver change needs (``driver_packages``: the driver stage's, this run).
    """
    if not probes.executing(host):
        # Preparing (a dry run, or the change detection before a confirmation): facts now would
        # predate the earlier stages, and the probes must run once. The steps run at execution.
        host.noop("verification runs when the deploy executes")
        return

    containerd = containerd_in_effect(options)
    # Read ahead by preflight (the node, and a plain containerd's verify read), reused while no operation
    # changed the host; otherwise read together in one command.
    try:
        node, readout, config, cuda, cdi, links, kernels, signing = read_together(
            host,
            [
                NODE_READ,
                verify_read(options, containerd),
                containerd_config_read(containerd),
                CUDA_READ,
                cdi_ops.state_read(),
                devices.links_read(options.driver_root),
                KERNELS_READ,
                signing_read(options),
            ],
        )
    except UnreadableOutput as error:
        yield failing_command(str(error))
        return
    readout = with_containerd_config(readout, config)
    readout = prepared(
        {
            **readout,
            CONTAINERD.name: {**readout[CONTAINERD.name], "socket": containerd.socket},
            "node": node,
            "cuda": cuda,
            "cdi": cdi,
            "device_links": links,
            "kernels": kernels,
            "signing": signing,
        }
    )
    # The runtimes may name another binary than the one the settings wire: check it too (a second
    # read, only then), by the path the parsed configs give.
    unchecked = configured_binaries(readout) - readout["executables"].keys()
    if unchecked:
        checked = host.get_fact(Executables, paths=tuple(sorted(unchecked)))
        readout = {**readout, "executables": {**readout["executables"], **checked}}
    runs = gpu_runs(readout, options, planned_runs(readout, options), token=uuid.uuid4().hex[:12])

    record = node_record(host.name, readout, options, all_steps(readout, options, runs))
    store = verify_report_store(host.state)
    store.verify_ops.add(host.current_op_hash)  # the table prints when this operation ends
    store.add(report_path, record)
    counts = {status: sum(step.status == status for step in record.steps) for status in (PASS, FAIL, SKIP)}
    summary = f"verified: {counts[PASS]} pass, {counts[FAIL]} fail, {counts[SKIP]} skip"
    host.noop(summary)
    for step in record.failed:
        logger.warning(f"{host.print_prefix}verify {step.name}: fail: {step.reason}")
    if record.failed:
        names = ", ".join(step.name for step in record.failed)
        if awaits_reboot(node, driver_packages):
            # Before that reboot no GPU step can pass: the run ends "reboot required" (exit 3,
            # deploy/reports/exit_status.py) rather than failed, and the run after the reboot verifies.
            logger.warning(
                f"{host.print_prefix}verification failed: {names}: the NVIDIA driver awaits the node's "
                "reboot; verify again after it"
            )
        else:
            yield failing_command(f"verification failed: {names}")
