"""
Every verify step of a node, in order, from each subject's module, and the node's record. Pure.
"""

from __future__ import annotations

from typing import Any

from ..driver.kernel_coverage import boot_kernels_step
from ..foundations import redact
from ..reports.node_report import NodeRecord, Step
from ..runtimes import registry
from .cdi import cdi_step, cdi_summary, cri_cdi_probe, runtime_mode_step
from .cluster import cgroup_steps, dev_char_step
from .driver_branch import lifecycle_step
from .gpu_driver import cuda_step, cuda_summary, gpu_steps
from .module_fabric import (
    fabric_manager_step,
    fabric_manager_summary,
    module_type_step,
    module_type_summary,
    persistence_step,
    persistence_summary,
)
from .module_signing import module_signing_step
from .options import VerifyOptions
from .readout import driver_version, gpus_on_pci
from .toolkit_runtimes import run_steps, runtime_config_steps, toolkit_steps
from .version_set import version_set_step


def all_steps(readout: dict[str, Any], options: VerifyOptions, runs: dict[str, dict[str, Any]]) -> list[Step]:
    """Every step, in order, from the facts (each runtime's reading prepared: readout.prepared) and
    the results of the runs that were done."""
    steps = gpu_steps(readout, options)
    # the module's type, persistence, Fabric Manager and CUDA's own start
    steps += [
        module_type_step(readout, options),
        persistence_step(readout, options),
        fabric_manager_step(readout, options),
        cuda_step(readout, options),
    ]
    # every installed kernel has a module, and the driver's parts are one version set
    steps.append(boot_kernels_step(readout.get("kernels")))
    steps.append(version_set_step(readout["node"]["loaded_version"], readout.get("kernels")))
    # who signed the modules and whether the key is enrolled; the driver branch's end of life
    steps += [module_signing_step(readout, options), lifecycle_step(readout, options)]
    steps += toolkit_steps(readout, options)
    steps += runtime_config_steps(readout, options)
    steps += cgroup_steps(readout, options)
    steps.append(cdi_step(readout, options))
    steps.append(runtime_mode_step(readout, options))
    steps.append(dev_char_step(readout, options))
    steps += run_steps(readout, options, runs, cri_cdi_probe(readout, options))
    return steps


def node_record(name: str, readout: dict[str, Any], options: VerifyOptions, steps: list[Step]) -> NodeRecord:
    smi_gpus = readout["smi"]["gpus"]
    if smi_gpus:
        gpus = [f"{gpu['name'] or '?'} ({gpu['uuid'] or 'no UUID'})" for gpu in smi_gpus]
    else:
        gpus = [f"{gpu['slot']} 10de:{gpu['device'].removeprefix('0x')}" for gpu in gpus_on_pci(readout)]
    runtime = [
        each.summary(readout[each.name])
        for each in registry.RUNTIMES
        if each.name in options.runtimes and readout[each.name]["path"]
    ]
    return NodeRecord(
        host=name,
        gpus=gpus,
        driver=driver_version(readout),
        toolkit=readout["toolkit_version"],
        runtime=", ".join(runtime) or None,
        kernel_module_type=module_type_summary(readout),
        persistence=persistence_summary(readout),
        fabric_manager=fabric_manager_summary(readout),
        cuda=cuda_summary(readout),
        cdi=cdi_summary(readout, options),
        # A reason quotes what the node printed, which can carry a URL's user-info.
        steps=[Step(step.name, step.status, redact.mask_text(step.reason)) for step in steps],
    )
