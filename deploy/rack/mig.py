"""
MIG layouts applied at every boot, pure: NVIDIA's mig-parted service (``nvidia-mig-manager.service``,
from its ``nvidia-mig-manager`` package) runs ``nvidia-mig-parted apply`` early in the boot, before the
GPU's users start. gpu-node writes what it applies from the ``mig_layout`` setting of a node group:

- the layout as mig-parted's config (its documented v1 format: ``version``, ``mig-configs``, a list per
  named config of ``devices`` (``all`` or GPU indexes), ``mig-enabled``, ``mig-devices`` (profile:
  count)), in a file of gpu-node's own: the package regenerates its ``config.yaml`` from the hardware
  at every boot and reads another one from ``MIG_PARTED_CONFIG_FILE``;
- its hooks file (mig-parted's v1 hooks: ``command``, ``args``, ``workdir`` per hook), which stops the
  GPU's clients before a MIG change and starts them after;
- a drop-in of the unit naming both and the selected layout (``MIG_PARTED_*``, what the service reads).

A layout change is applied by the run where nothing but the driver's own services holds the GPU
(deploy/driver/reload.py's holders), else "drain required"; with no nvidia module loaded it waits for
the next boot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from ..driver.reload import Holder, named
from .values import MigLayout

MIG_UNIT = "nvidia-mig-manager.service"
CONFIG_DIR = "/etc/nvidia-mig-manager"
CONFIG_PATH = f"{CONFIG_DIR}/gpu-node-config.yaml"
HOOKS_PATH = f"{CONFIG_DIR}/gpu-node-hooks.yaml"
# systemd applies a unit's drop-ins in name order: after the package's own override.conf, which sets
# MIG_PARTED_SELECTED_CONFIG=all-disabled
DROP_IN_PATH = f"/etc/systemd/system/{MIG_UNIT}.d/zz-gpu-node.conf"
# The GPU's clients the hooks stop before a MIG change and start after, those the node has enabled: the
# kubelet (its device plugin and pods), DCGM and its exporter; persistenced too before a mode change
# (it holds the GPU open, and a mode change resets the GPU). Fabric Manager stays: the unit runs after it.
CLIENT_UNITS = ("kubelet.service", "dcgm-exporter.service", "nvidia-dcgm.service")
MODE_CLIENT_UNITS = ("nvidia-persistenced.service",)
SYSTEMCTL = "/bin/systemctl"  # hooks run with only their own environment: no PATH


def config_text(layout: MigLayout) -> str:
    """mig-parted's config file (v1) holding ``layout`` as its one named config."""
    entries = []
    for gpu in layout.gpus:
        entry: dict[str, Any] = {
            "devices": gpu.devices if gpu.devices == "all" else list(gpu.devices),
            "mig-enabled": bool(gpu.profiles),
        }
        if gpu.profiles:
            entry["mig-devices"] = dict(gpu.profiles)
        entries.append(entry)
    spec = {"version": "v1", "mig-configs": {layout.name: entries}}
    return "# Managed by gpu-node (mig_layout): nvidia-mig-parted's config\n" + yaml.safe_dump(spec, sort_keys=False)


def hooks_text(enabled_units: Mapping[str, Any]) -> str:
    """mig-parted's hooks file (v1): the node's enabled GPU clients stopped before a MIG mode or device
    change and started again at the end (``enabled_units``: systemctl is-enabled by unit)."""

    def enabled(units: Iterable[str]) -> list[str]:
        return [unit for unit in units if enabled_units.get(unit) in ("enabled", "enabled-runtime", "static")]

    clients, mode_clients = enabled(CLIENT_UNITS), enabled(MODE_CLIENT_UNITS)
    hooks: dict[str, list[dict[str, Any]]] = {}
    if clients or mode_clients:
        hooks["pre-apply-mode"] = [_systemctl("stop", clients + mode_clients)]
        hooks["apply-exit"] = [_systemctl("start", list(reversed(clients + mode_clients)))]
    if clients:
        hooks["pre-apply-config"] = [_systemctl("stop", clients)]
    spec = {"version": "v1", "hooks": hooks}
    return "# Managed by gpu-node (mig_layout): the GPU's clients around a MIG change\n" + yaml.safe_dump(
        spec, sort_keys=False
    )


def _systemctl(verb: str, units: list[str]) -> dict[str, Any]:
    return {"workdir": "/", "command": SYSTEMCTL, "args": [verb, *units]}


def drop_in_text(layout: MigLayout) -> str:
    """The unit's drop-in: gpu-node's config and hooks, and the layout selected."""
    values = {
        "MIG_PARTED_CONFIG_FILE": CONFIG_PATH,
        "MIG_PARTED_HOOKS_FILE": HOOKS_PATH,
        "MIG_PARTED_SELECTED_CONFIG": layout.name,
    }
    return (
        "# Managed by gpu-node (mig_layout): the layout nvidia-mig-manager.service applies at every boot\n"
        "[Service]\n" + "".join(f'Environment="{key}={value}"\n' for key, value in values.items())
    )


@dataclass(frozen=True)
class LayoutChange:
    """What a run does about a layout whose files change: apply it now, wait for the boot, or refuse."""

    apply_now: bool
    line: str
    refusal: str | None = None


# The one line a change refused because a process holds the GPU says, around who holds it (the run's
# plan and deploy/shell/mig_apply.sh's own check at the change)
BUSY = (
    "drain required: MIG layout {layout} changes the GPUs' partitions and ",
    ": drain the node (drain_before_restart=true) or stop it, and rerun",
)
UNKNOWN = "fuser (psmisc) is not installed, so who holds /dev/nvidia* is unknown"


def busy_line(layout: MigLayout, holders_text: str) -> str:
    return BUSY[0].format(layout=layout.name) + holders_text + BUSY[1]


def layout_change(
    layout: MigLayout, module_loaded: bool, fuser: bool, holders: list[Holder], drain: bool
) -> LayoutChange:
    """A changed layout applied now (the unit restarted: its hooks stop and start the clients) where
    nothing but the driver's own services holds the GPU, or after ``drain``; "drain required" else."""
    if not module_loaded:
        return LayoutChange(False, f"MIG layout {layout.name}: no nvidia module loaded, applied at the next boot")
    others = [holder for holder in holders if holder.unit is None]
    if (others or not fuser) and not drain:
        return LayoutChange(False, "", refusal=busy_line(layout, named(others) if fuser else UNKNOWN))
    return LayoutChange(True, f"MIG layout {layout.name}: applied now by {MIG_UNIT}")
