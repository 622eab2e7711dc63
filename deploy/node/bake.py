"""
A bake: the deploy run against an image root with pyinfra's ``@chroot/<root>`` connector
(docs/without-controller.md). There is no running systemd, no GPU and not the image's kernel, so
the run does only what an image can hold and says, in one line each, what it leaves to the booted
node. Pure: which steps run, and with which settings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..settings import Settings

if TYPE_CHECKING:
    from pyinfra.connectors.base import BaseConnector

# step -> why an image root does not run it (the booted node's first-boot unit, or a pull or
# controller run after boot, does)
SKIPPED_IN_AN_IMAGE = {
    "cdi": "the CDI spec needs the driver loaded: the first-boot unit generates it at every boot",
    "verify": "verify needs the booted node: the first-boot unit verifies at every boot",
    "verify dra": "verify needs the booted node: the first-boot unit verifies at every boot",
    "verify rack": "verify needs the booted node: run deploy/verify.py on it",
    "imex": "an IMEX domain's members and addresses are the booted hosts': run gpu-node on the node",
    "uncordon": "an image is no Kubernetes node",
}
# Settings an image root must not act on now: no module loaded into, no sysctl written to, and no
# reboot of the builder. The first-boot unit keeps the site's own values for the booted node.
IMAGE_OVERRIDES = {"kernel_modules_load": False, "reboot_allowed": False}
KEEPS_SITE_SETTINGS = ("first boot",)


def is_image_root(connector: BaseConnector) -> bool:
    """Whether pyinfra runs this host through its @chroot connector: an image root, not a node."""
    from pyinfra.connectors.chroot import ChrootConnector

    return isinstance(connector, ChrootConnector)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


NamedStep = TypeVar("NamedStep", bound=_Named)  # deploy/stages.py's Step, a layer above


def image_steps(steps: list[NamedStep], say: Callable[[str], object]) -> list[NamedStep]:
    """The steps a bake runs, in order; ``say`` gets one line for each it skips."""
    kept = []
    for step in steps:
        why = SKIPPED_IN_AN_IMAGE.get(step.name)
        if why is None:
            kept.append(step)
        else:
            say(f"bake: {step.name} skipped in an image root: {why}")
    return kept


def step_settings(settings: Settings, step_name: str) -> Settings:
    """The settings ``step_name`` runs with in an image root."""
    if step_name in KEEPS_SITE_SETTINGS:
        return settings
    return settings.model_copy(update=IMAGE_OVERRIDES)
