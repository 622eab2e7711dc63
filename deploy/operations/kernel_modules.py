"""
Operations keeping an NVIDIA module for every installed kernel (deploy/driver/kernel_coverage.py decides):
the headers metapackage kept in step with the kernel metapackage, each kernel's headers and a DKMS
build where one lacks the module, and the refusal of a reboot into a kernel that has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, QuoteString, StringCommand, operation

from ..driver import kernel_coverage
from ..facts.installed_kernels import InstalledKernels
from ..facts.nvidia import PackagesAvailable
from ..facts.read_ahead import FactCall, known_fact
from ..foundations.pyinfra_api import Commands
from . import probes
from .failure import fail_host, failing_command
from .package_manager import PackageManager
from .progress import announcing

if TYPE_CHECKING:
    from pyinfra.api import Host, State

# What these operations read (the driver stage's preflight and verify read it ahead)
KERNELS_READ: FactCall = (InstalledKernels, {})


def dkms_failure(release: str, lines: list[str]) -> str:
    """One line naming the kernel DKMS could not build for, and what it said last."""
    said = [line.strip() for line in lines if line.strip()]
    return (
        f"DKMS could not build the NVIDIA kernel module for installed kernel {release} (dkms autoinstall -k "
        f"{release}): {said[-1] if said else 'no output'}; see /var/lib/dkms/*/*/build/make.log on the node"
    )


def _dkms_build(state: State, host: Host, release: str) -> bool:
    succeeded, output = host.run_shell_command(
        StringCommand("dkms", "autoinstall", "-k", QuoteString(release)),
        print_output=state.print_output,
        print_input=state.print_input,
        **probes.connector_arguments(host),
    )
    return True if succeeded else fail_host(state, host, dkms_failure(release, output.output_lines))


@operation()
def cover_installed_kernels(
    manager: PackageManager, headers_template: str | None, following: tuple[str, str] | None, lock_timeout: int
) -> Commands:
    """
    Every installed kernel gets the driver's module: the headers metapackage following each kernel
    metapackage installed (held where the kernel's is: ``following``, the family's rule), each
    kernel without the module gets its headers (``headers_template``, {kernel}) and a DKMS build.
    A kernel without the module on a node without DKMS is named (verify fails on it).
    """
    fact = known_fact(host, InstalledKernels)
    follow = kernel_coverage.following_headers(fact["packages"], following)
    if follow:
        available = host.get_fact(PackagesAvailable, check=manager.available_check, packages=sorted(follow))
        follow = {name: held for name, held in follow.items() if available.get(name)}
    plan = kernel_coverage.build_plan(fact, headers_template)
    for release in plan.unbuildable:
        logger.warning(
            f"{host.print_prefix}installed kernel {release} has no NVIDIA module and this node has no "
            "DKMS to build one: install the driver's module package for it, or remove the kernel"
        )
    if not (follow or plan.headers or plan.builds):
        host.noop(
            "every installed kernel has the NVIDIA module"
            if not plan.unbuildable
            else "no DKMS to build the missing modules"
        )
        return
    for hold in (False, True):
        names = {name: None for name, held in follow.items() if held is hold}
        if names:
            yield from manager.install._inner(packages=names, hold=hold, lock_timeout=lock_timeout)
    if plan.headers:
        yield from manager.install._inner(
            packages={name: None for name in plan.headers}, hold=False, lock_timeout=lock_timeout
        )
    if plan.builds:
        yield announcing(
            f"building the NVIDIA kernel module with DKMS for installed kernel(s) "
            f"{', '.join(plan.builds)}: typically 2 to 10 minutes each"
        )
    for release in plan.builds:
        yield FunctionCommand(_dkms_build, (release,), {})


@operation()
def refuse_reboot_without_module() -> Commands:
    """Fail the host instead of rebooting it into a kernel without the NVIDIA module (read now, after
    the run's changes)."""
    refusal = kernel_coverage.reboot_refusal(known_fact(host, InstalledKernels))
    if refusal:
        yield failing_command(refusal)
        return
    host.noop("the next boot's kernel has the NVIDIA module")
