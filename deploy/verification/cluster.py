"""
Verify's cluster steps: the kubelet's cgroup driver against the runtimes it starts pods with through
a wired runtime's CRI (containerd's), and the /dev/char links the systemd cgroup driver needs. Pure.
"""

from __future__ import annotations

import posixpath
from typing import Any

import yaml

from ..facts.devices import missing_links
from ..facts.verification import KUBELET_CONFIG
from ..foundations import node_text
from ..reports.node_report import FAIL, PASS, SKIP, Step
from ..runtimes import registry
from .options import VerifyOptions


def kubelet_cgroup_driver(text: str) -> str:
    config = node_text.parsed(yaml.safe_load, text, KUBELET_CONFIG) or {}
    # The kubelet's own default when the file does not set it.
    return str(config.get("cgroupDriver") or "cgroupfs") if isinstance(config, dict) else "cgroupfs"


def cgroup_steps(readout: dict[str, Any], options: VerifyOptions) -> list[Step]:
    if readout["kubelet_config"] is None:
        return [Step("cgroup_driver", SKIP, f"no {KUBELET_CONFIG} (the kubelet is not configured yet)")]
    try:
        driver = kubelet_cgroup_driver(readout["kubelet_config"])
    except node_text.UnreadableText as error:
        return [Step("cgroup_driver", FAIL, str(error))]
    except yaml.YAMLError as error:
        return [
            Step(
                "cgroup_driver",
                FAIL,
                f"cannot parse {KUBELET_CONFIG}: {node_text.syntax_error(error, readout['kubelet_config'])}",
            )
        ]
    kubelet_systemd = driver == "systemd"
    cri_runtimes = [
        (runtime, cgroups) for runtime in registry.RUNTIMES if (cgroups := runtime.kubelet_cgroups) is not None
    ]
    checks = [
        (runtime.title, name, systemd)
        for runtime, cgroups in cri_runtimes
        if runtime.name in options.runtimes
        for name, systemd in cgroups(readout[runtime.name])
    ]
    if not checks:
        titles = " or ".join(runtime.title for runtime, _ in cri_runtimes)
        return [Step("cgroup_driver", SKIP, f"kubelet cgroupDriver: {driver}; no {titles} runtime to compare with")]
    wrong = [(title, name, value) for title, name, value in checks if value != kubelet_systemd]
    if wrong:
        listed = ", ".join(
            f"{title} runtime {name} SystemdCgroup = {str(value).lower()}" for title, name, value in wrong
        )
        fix = "systemd_cgroup=true" if kubelet_systemd else "systemd_cgroup=false"
        return [
            Step(
                "cgroup_driver",
                FAIL,
                f"{listed} but kubelet cgroupDriver: {driver} ({KUBELET_CONFIG}): set {fix} and re-run "
                "deploy/gpu_node.py (or change the kubelet's cgroupDriver)",
            )
        ]
    return [
        Step(
            "cgroup_driver",
            PASS,
            f"kubelet cgroupDriver: {driver} matches SystemdCgroup = {str(kubelet_systemd).lower()}",
        )
    ]


def dev_char_step(readout: dict[str, Any], options: VerifyOptions) -> Step:
    """Every NVIDIA device node linked in /dev/char, where the systemd cgroup driver needs it."""
    if not options.wiring.systemd_cgroup:
        return Step("dev_char", SKIP, "systemd_cgroup is false: systemd does not manage the containers' devices")
    devices = readout["device_links"]
    if not devices:
        return Step("dev_char", SKIP, f"no NVIDIA device nodes under {posixpath.join(options.driver_root, 'dev')}")
    missing = missing_links(devices)
    if missing:
        listed = ", ".join(f"{device['node']} ({device['id']})" for device in missing)
        return Step(
            "dev_char",
            FAIL,
            f"no /dev/char link for {listed}: a systemd daemon-reload takes it from "
            "running containers; run the deploy (its device links stage)",
        )
    return Step("dev_char", PASS, f"{len(devices)} NVIDIA device node(s) linked in /dev/char")
