"""Kernel facts and operations: built-in modules count as present; only differing sysctls are set."""

from __future__ import annotations

import pytest
from plan import run_plan, settings_for

from deploy.distros.families import detect_platform
from deploy.facts.kernel_state import KernelState
from deploy.operations.files import digest_read
from deploy.operations.kernel import module_present, module_read, sysctls_read
from deploy.tasks.kernel import KUBERNETES_MODULES, KUBERNETES_SYSCTLS, kernel_prerequisites, read_files

# The main paths, as ``pyinfra -y`` and in the CLI's default mode (tests/plan.py).
pytestmark = pytest.mark.usefixtures("both_modes")

# Output of KernelState's command on the CI machine's kernel: overlay and the bridge
# netfilter are built in (no /sys/module/br_netfilter, no modprobe), the sysctls exist.
BUILT_IN_OUTPUT = [
    "module overlay 0",
    "module br_netfilter 0",
    "filesystems sysfs tmpfs proc ext4 overlay",
    "sysctl net.bridge.bridge-nf-call-iptables 1",
    "sysctl net.bridge.bridge-nf-call-ip6tables 1",
    "sysctl net.ipv4.ip_forward 1",
]


def test_kernel_state_parses_modules_filesystems_and_sysctls():
    state = KernelState().process(BUILT_IN_OUTPUT + ["sysctl net.example.missing"])
    assert state["modules"] == {"overlay": False, "br_netfilter": False}
    assert "overlay" in state["filesystems"]
    assert state["sysctls"]["net.ipv4.ip_forward"] == "1"
    assert state["sysctls"]["net.example.missing"] is None


def test_built_in_modules_count_as_present_though_absent_from_sys_module():
    state = KernelState().process(BUILT_IN_OUTPUT)
    assert module_present(state, "overlay", "overlay", None)
    assert module_present(state, "br_netfilter", None, "net.bridge.bridge-nf-call-iptables")


def test_a_module_with_no_evidence_is_absent():
    state = KernelState().process(
        ["module br_netfilter 0", "filesystems ext4", "sysctl net.bridge.bridge-nf-call-iptables"]
    )
    assert not module_present(state, "br_netfilter", None, "net.bridge.bridge-nf-call-iptables")


def debian():
    return detect_platform({"name": "debian", "release_meta": {"ID": "debian"}}, "x86_64")


def files_absent() -> list:
    """The kernel stage's files, none written yet."""
    return [(digest_read(path), "absent") for path in read_files()]


def test_loading_now_modprobes_only_absent_modules_and_sets_only_differing_sysctls():
    plan = run_plan(
        kernel_prerequisites,
        settings_for(kernel_modules_load=True),
        debian(),
        facts=[
            *files_absent(),
            (module_read("overlay", KUBERNETES_MODULES["overlay"][1]), ["module overlay 1", "filesystems overlay"]),
            (
                module_read("br_netfilter", KUBERNETES_MODULES["br_netfilter"][1]),
                ["module br_netfilter 0", "filesystems overlay", "sysctl net.bridge.bridge-nf-call-iptables"],
            ),
            (
                sysctls_read(KUBERNETES_SYSCTLS),
                [
                    "sysctl net.bridge.bridge-nf-call-ip6tables 1",
                    "sysctl net.bridge.bridge-nf-call-iptables 1",
                    "sysctl net.ipv4.ip_forward 0",
                ],
            ),
        ],
    )
    assert plan.starting("modprobe") == ["modprobe br_netfilter"]
    assert plan.starting("sysctl -w") == ["sysctl -w net.ipv4.ip_forward=1"]


def test_kernel_modules_load_false_never_touches_the_running_kernel():
    plan = run_plan(kernel_prerequisites, settings_for(kernel_modules_load=False), debian(), facts=files_absent())
    assert not plan.starting("modprobe") and not plan.starting("sysctl -w")
    assert plan.ran("/etc/modules-load.d/gpu-node-kubernetes.conf")
    assert plan.ran("/etc/sysctl.d/99-gpu-node-kubernetes.conf")


def nvlink5_node() -> dict:
    """NodeSurvey of an HGX B200 node: ConnectX bridges marked SW_MNG (tests/fixtures/fabric/hgx-b200.json)."""
    from deploy.facts.nvidia import NodeSurvey

    return NodeSurvey().process(["pci 0000:1b:00.0 0x2901 0x030200", "mellanox 0000:ab:00.0 0x1021 0x060400 SW_MNG"])


def test_an_nvlink5_node_persists_and_loads_ib_umad_for_fabric_manager():
    from deploy.driver.fabric import NVLINK5_MODULES_LOAD_PATH

    facts = [
        *files_absent(),
        (digest_read(NVLINK5_MODULES_LOAD_PATH), "absent"),
        (module_read("ib_umad", None), ["module ib_umad 0"]),
        (module_read("overlay", None), ["module overlay 1"]),
        (module_read("br_netfilter", KUBERNETES_MODULES["br_netfilter"][1]), ["module br_netfilter 1"]),
        (sysctls_read(KUBERNETES_SYSCTLS), [f"sysctl {key} {value}" for key, value in KUBERNETES_SYSCTLS.items()]),
    ]
    plan = run_plan(kernel_prerequisites, settings_for(kernel_modules_load=True), debian(), nvlink5_node(), facts=facts)
    assert plan.ran(NVLINK5_MODULES_LOAD_PATH) and plan.starting("modprobe") == ["modprobe ib_umad"]
    # fabric_manager_install=false: none of it
    plan = run_plan(
        kernel_prerequisites,
        settings_for(kernel_modules_load=True, fabric_manager_install=False),
        debian(),
        nvlink5_node(),
        facts=facts,
    )
    assert not plan.ran(NVLINK5_MODULES_LOAD_PATH) and not plan.starting("modprobe")
