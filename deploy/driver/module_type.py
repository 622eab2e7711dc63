"""
Which kernel module type (open or proprietary; the GPU Operator's ``kernelModuleType``) the NVIDIA
driver needs on a node, from the
GPUs on its PCI bus and the driver branch: pure, no host.

The architecture of a GPU comes from its PCI device ID through ``ARCHITECTURE_RANGES``, written
here as chip-family ranges and checked against NVIDIA's own list of supported GPUs (the README of
the open GPU kernel modules, release 595.45.04, for Turing and later; Debian's nvidia-detect lists
of the 535 driver for Maxwell, Pascal and Volta). Where the node has the installed branch's own
list (the driver's supported-gpus.json, Debian's /usr/share/nvidia/*.ids), that list wins for the
branch: see ``BranchList``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

KernelModuleType = Literal["open", "proprietary"]
OPEN: KernelModuleType = "open"
PROPRIETARY: KernelModuleType = "proprietary"
BOTH = frozenset({OPEN, PROPRIETARY})

# From this branch on NVIDIA makes the open modules the default where the GPU allows both.
OPEN_DEFAULT_BRANCH = 560

# (first device ID, last device ID, architecture), by chip family
ARCHITECTURE_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x1340, 0x15EF, "Maxwell"),  # GM108, GM107, GM204, GM206
    (0x15F0, 0x15FF, "Pascal"),  # GP100
    (0x1600, 0x17FF, "Maxwell"),  # GM206, GM200
    (0x1B00, 0x1D7F, "Pascal"),  # GP102, GP104, GP106, GP107, GP108
    (0x1D80, 0x1DFF, "Volta"),  # GV100
    (0x1E00, 0x1FFF, "Turing"),  # TU102, TU104, TU106, TU117
    (0x2080, 0x20FF, "Ampere"),  # GA100
    (0x2180, 0x21FF, "Turing"),  # TU116
    (0x2200, 0x22FF, "Ampere"),  # GA102
    (0x2300, 0x233F, "Hopper"),  # GH100
    (0x2340, 0x234F, "Grace Hopper"),  # GH100 on GH200 (0x2342, 0x2348)
    (0x2400, 0x25FF, "Ampere"),  # GA103, GA104, GA106, GA107
    (0x2680, 0x28FF, "Ada Lovelace"),  # AD102, AD103, AD104, AD106, AD107
    (0x2900, 0x29FF, "Blackwell"),  # GB100, GB102 (B200, GB200)
    (0x2B00, 0x2FFF, "Blackwell"),  # GB202 to GB207, GB10
    (0x3100, 0x31FF, "Blackwell"),  # GB110 (B300, GB300)
)

# What each architecture allows; Turing to Hopper allow both (the branch picks the default).
OPEN_ONLY = ("Blackwell", "Grace Hopper")
PROPRIETARY_ONLY = ("Maxwell", "Pascal", "Volta")


class KernelModuleTypeRefusal(ValueError):
    """The setting or the node's GPUs allow no kernel module type: one line naming why."""


def device_id(text: str | int) -> int | None:
    """``0x20b0`` / ``20B0`` / ``10DE20B0`` (nvidia-detect's vendor+device) -> 0x20b0."""
    if isinstance(text, int):
        return text
    value = text.strip().lower()
    value = value[2:] if value.startswith("0x") else value
    if len(value) == 8 and value.startswith("10de"):
        value = value[4:]
    try:
        return int(value, 16)
    except ValueError:
        return None


def architecture(device: int) -> str | None:
    return next((name for first, last, name in ARCHITECTURE_RANGES if first <= device <= last), None)


def module_types_of(arch: str) -> frozenset[KernelModuleType]:
    if arch in OPEN_ONLY:
        return frozenset({OPEN})
    if arch in PROPRIETARY_ONLY:
        return frozenset({PROPRIETARY})
    return BOTH


def branch_default(branch: int | None) -> KernelModuleType:
    return OPEN if branch is not None and branch >= OPEN_DEFAULT_BRANCH else PROPRIETARY


@dataclass(frozen=True)
class BranchList:
    """
    The installed branch's own list of the GPUs it drives. ``open_known``: the list says for every
    GPU whether the open modules drive it (supported-gpus.json's ``kernelopen`` feature); else
    ``open_ids`` only names some that they do (Debian's nvidia-open.ids).
    """

    source: str
    supported: frozenset[int]
    open_ids: frozenset[int] = frozenset()
    open_known: bool = False


@dataclass(frozen=True)
class Gpu:
    device: int
    slot: str
    arch: str | None
    allowed: frozenset[KernelModuleType] | None  # None: nothing says (unknown ID): no constraint

    @property
    def shown(self) -> str:
        return f"0x{self.device:04x} ({self.arch or 'unknown architecture'}) at {self.slot}"


@dataclass(frozen=True)
class KernelModuleTypeDecision:
    kernel_module_type: KernelModuleType
    why: str
    warnings: list[str] = field(default_factory=list)


def _gpu(entry: dict[str, Any], branch_list: BranchList | None) -> Gpu | None:
    device = device_id(entry.get("device", ""))
    if device is None:
        return None
    arch = architecture(device)
    allowed = module_types_of(arch) if arch else None
    if branch_list is not None and device in branch_list.supported:
        # The branch's own list wins on what its open modules drive.
        can_open = device in branch_list.open_ids or (
            not branch_list.open_known and allowed is not None and OPEN in allowed
        )
        can_proprietary = allowed is None or PROPRIETARY in allowed
        allowed = frozenset(({OPEN} if can_open else set()) | ({PROPRIETARY} if can_proprietary else set()))
    return Gpu(device=device, slot=entry.get("slot", "?"), arch=arch, allowed=allowed)


def decide_kernel_module_type(
    setting: str, gpus: Iterable[dict[str, Any]], branch: int | None, branch_list: BranchList | None = None
) -> KernelModuleTypeDecision:
    """
    The kernel module type for ``setting`` (auto, open, proprietary) on a node with ``gpus`` (NodeSurvey's
    entries) and the driver ``branch``; raises KernelModuleTypeRefusal when none fits.
    """
    default = branch_default(branch)
    branch_shown = f"branch {branch}" if branch is not None else "the driver's branch"
    warnings = []
    known: list[tuple[Gpu, frozenset[KernelModuleType]]] = []  # (a GPU, the types it allows)
    for entry in gpus:
        gpu = _gpu(entry, branch_list)
        if gpu is None:
            continue
        if branch_list is not None and gpu.device not in branch_list.supported:
            warnings.append(f"GPU {gpu.shown} is not in {branch_list.source}: {branch_shown} may not drive it")
        if gpu.allowed is None:
            warnings.append(
                f"GPU device ID 0x{gpu.device:04x} at {gpu.slot} is not in gpu-node's table of NVIDIA "
                f"GPUs: using {branch_shown}'s default kernel modules ({default})"
            )
            continue
        known.append((gpu, gpu.allowed))

    allowed = frozenset(BOTH)
    for _, gpu_allows in known:
        allowed &= gpu_allows
    if not allowed:
        needs = "; ".join(
            f"{gpu.shown} needs {' or '.join(sorted(gpu_allows)) or 'a type none allows'}" for gpu, gpu_allows in known
        )
        raise KernelModuleTypeRefusal(f"the GPUs on this node allow no common kernel module type: {needs}")

    if setting in (OPEN, PROPRIETARY):
        if setting not in allowed:
            blocking, blocking_allows = next((gpu, allows) for gpu, allows in known if setting not in allows)
            other = next(iter(blocking_allows))
            raise KernelModuleTypeRefusal(
                f"nvidia_kernel_modules={setting!r} does not drive GPU {blocking.shown}: it works only with the "
                f"{other} kernel modules; set nvidia_kernel_modules={other} or auto"
            )
        return KernelModuleTypeDecision(setting, f"nvidia_kernel_modules={setting}", warnings)

    if not known:
        return KernelModuleTypeDecision(default, f"{branch_shown}'s default (no GPU it knows on the node)", warnings)
    if default in allowed:
        return KernelModuleTypeDecision(default, f"{branch_shown}'s default, which every GPU here allows", warnings)
    chosen = next(iter(allowed))
    # a GPU the branch's list knows and the architecture table does not: named by its device ID
    archs = ", ".join(sorted({gpu.arch or f"0x{gpu.device:04x}" for gpu, allows in known if default not in allows}))
    return KernelModuleTypeDecision(chosen, f"{archs} GPUs work only with the {chosen} kernel modules", warnings)


def branch_list_from(lists: dict[str, Any], branch: str | None, installed_branch: str | None) -> BranchList | None:
    """
    The list that speaks for the driver ``branch`` out of the GpuSupportLists fact: the driver's
    supported-gpus.json when the installed driver is of that branch, else Debian's nvidia-detect
    list for it (nvidia-tesla-<branch>.ids with a branch, nvidia.ids without), with nvidia-open.ids.
    """
    json_lists = lists.get("json") or {}
    if json_lists and (branch is None or branch == installed_branch):
        path, devices = sorted(json_lists.items())[0]
        return BranchList(
            source=path,
            supported=frozenset(devices),
            open_ids=frozenset(d for d, is_open in devices.items() if is_open),
            open_known=True,
        )
    ids = lists.get("ids") or {}
    name = f"nvidia-tesla-{branch}.ids" if branch else "nvidia.ids"
    if name not in ids:
        return None
    return BranchList(
        source=f"/usr/share/nvidia/{name}",
        supported=frozenset(ids[name]),
        open_ids=frozenset(ids.get("nvidia-open.ids", ())),
    )
