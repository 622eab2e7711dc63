"""
The MIG layout step of the driver stage (mig_layout; deploy/rack/mig.py decides): NVIDIA's mig-parted
service installed (``nvidia-mig-manager``), the layout, its hooks and the unit's drop-in written, the
unit enabled: it applies the layout at every boot, before the GPU's users start. A changed layout is
applied by the run too where the driver is loaded: preflight refuses, before any change, a node where a
process other than the driver's own services holds the GPU ("drain required"), unless
drain_before_restart drains it first; the change's own command checks again.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from pyinfra import host, logger
from pyinfra.operations import server

from ..distros.families import Platform
from ..distros.package_managers import install_packages
from ..facts.gpu_holders import DeviceHolders
from ..facts.read_ahead import FactCall, read
from ..facts.units import UnitsEnabled
from ..foundations.pyinfra_api import deploy
from ..operations import drain as drain_ops
from ..operations import files, rack, units
from ..operations.drain import DrainTarget
from ..planning.findings import StepCheck
from ..rack import mig
from ..rack.values import MigLayout
from ..settings import Settings

CLIENTS_READ: FactCall = (UnitsEnabled, {"units": (*mig.CLIENT_UNITS, *mig.MODE_CLIENT_UNITS)})
UNIT_READ: FactCall = (UnitsEnabled, {"units": (mig.MIG_UNIT,)})
# mig-parted's own check of a candidate config: valid, and holding the layout it is to apply
VALID_CONFIG = "nvidia-mig-parted assert --valid-config --config-file {candidate} --selected-config "


@dataclass(frozen=True)
class MigPlan:
    layout: MigLayout
    files: dict[str, str]  # path -> text, those that differ from the node's
    apply_now: bool
    line: str


def wanted_files(layout: MigLayout, enabled_clients: dict[str, Any]) -> dict[str, str]:
    return {
        mig.CONFIG_PATH: mig.config_text(layout),
        mig.HOOKS_PATH: mig.hooks_text(enabled_clients),
        mig.DROP_IN_PATH: mig.drop_in_text(layout),
    }


def reads(settings: Settings) -> list[FactCall]:
    """What the step decides on, for preflight to read ahead: the same calls its operations make."""
    return [
        CLIENTS_READ,
        UNIT_READ,
        (DeviceHolders, {}),
        *(files.digest_read(path) for path in (mig.CONFIG_PATH, mig.HOOKS_PATH, mig.DROP_IN_PATH)),
    ]


def preflight_check(settings: Settings, platform: Platform, nvidia: dict[str, Any]) -> StepCheck:
    """The files that change, and whether the change is applied now: refused ("drain required") where a
    process other than the driver's own services holds the GPU and no drain is set."""
    layout = settings.mig_layout
    if layout is None:  # the step runs only with a layout (deploy/stages.py)
        return StepCheck()
    texts = wanted_files(layout, read(host, CLIENTS_READ))
    changing = {
        path: text
        for path, text in texts.items()
        if not files.text_up_to_date(read(host, files.digest_read(path)), text)
    }
    if not changing:
        return StepCheck(plan=MigPlan(layout, {}, False, f"MIG layout {layout.name}: its files are up to date"))
    holders = read(host, (DeviceHolders, {}))
    change = mig.layout_change(
        layout,
        bool(nvidia.get("loaded_version")),
        holders["fuser"],
        holders["holders"],
        drain=settings.drain_before_restart,
    )
    if change.refusal:
        return StepCheck(errors=[change.refusal])
    return StepCheck(plan=MigPlan(layout, changing, change.apply_now, change.line))


@deploy("MIG layout")
def mig_layout(settings: Settings, platform: Platform, plan: MigPlan, drain: DrainTarget | None = None) -> None:
    package = settings.mig_manager_package
    install_packages(
        platform.family.package_manager,
        f"Install NVIDIA's mig-parted service ({package})",
        [package],
        lock_timeout=settings.apt_lock_timeout,
    )
    for path, text in plan.files.items():
        check = VALID_CONFIG + shlex.quote(plan.layout.name) if path == mig.CONFIG_PATH else None
        files.put_text(name=f"Put {path} (MIG layout {plan.layout.name})", dest=path, content=text, check=check)
    enabled = read(host, UNIT_READ)
    if enabled.get(mig.MIG_UNIT) != "enabled":
        units.enable_unit_files(
            name=f"Enable {mig.MIG_UNIT} (it applies the layout at every boot)", units=[mig.MIG_UNIT], enabled=enabled
        )
    if not plan.files:
        return
    logger.info(f"{host.print_prefix}{plan.line}")
    if plan.apply_now:
        applied = rack.apply_mig_layout(
            name=f"Apply MIG layout {plan.layout.name} now ({mig.MIG_UNIT})", layout=plan.layout, drain=drain
        )
        drain_ops.watch(drain, applied)
    elif mig.DROP_IN_PATH in plan.files:
        server.shell(
            name=f"Reload systemd's units ({mig.MIG_UNIT}'s drop-in changed)",
            commands=["if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi"],
        )
