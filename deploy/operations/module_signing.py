"""
Operations signing the NVIDIA kernel modules DKMS builds (deploy/planning/module_signing.py decides):
the key generated on the node, the modules built before it rebuilt, the key's enrollment staged with
mokutil. No secret reaches a command line, a log or --diff: the key never leaves the node, and of
the MOK password only its crypt hash goes there, as a root-only file.
"""

from __future__ import annotations

from passlib.hash import sha512_crypt
from pyinfra import host, logger
from pyinfra.api import StringCommand, operation

from ..facts.module_signing import ModuleSigningState
from ..facts.read_ahead import FactCall, read
from ..foundations import shell_scripts
from ..foundations.pyinfra_api import Commands
from .progress import announcing
from .upload import Staging, Upload

# mokutil's own --generate-hash rounds (SHA-512 crypt's default): the MOK manager checks the
# password at boot, before any OS, where more rounds would be seconds of waiting
MOK_HASH_ROUNDS = 5000


def state_read(key: str, cert: str) -> FactCall:
    """What these operations read (preflight reads it ahead with the same call)."""
    return (ModuleSigningState, {"key": key, "cert": cert})


def password_hash(password: str) -> str:
    """The SHA-512 crypt hash ``mokutil --hash-file`` reads (what ``mokutil --generate-hash`` prints)."""
    hashed: str = sha512_crypt.using(rounds=MOK_HASH_ROUNDS).hash(password)
    return hashed


@operation()
def generate_key(folder: str, key: str, cert: str) -> Commands:
    """The module signing key and its certificate (DER) at ``key`` and ``cert``, generated on the node
    where they are missing (deploy/shell/module_signing_key.sh); kept where they are."""
    state = read(host, state_read(key, cert))
    if state["key"] is not None and state["cert"] is not None:
        host.noop(f"the module signing key {key} is kept")
        return
    yield StringCommand(shell_scripts.script("module_signing_key", folder=folder, key=key, cert=cert))


@operation()
def rebuild_unsigned(cert: str, kernels: list[str]) -> Commands:
    """DKMS rebuilds (and so signs) the NVIDIA modules of ``kernels``, which it built before the key;
    the script skips a kernel whose modules the key signs by the time it runs."""
    if not kernels:
        host.noop("every NVIDIA module DKMS built is signed by the module signing key")
        return
    yield announcing(
        f"rebuilding the NVIDIA kernel modules with DKMS to sign them, for kernel(s) {', '.join(kernels)}: "
        "typically 2 to 10 minutes each"
    )
    yield StringCommand(shell_scripts.script("module_signing_rebuild", kernels, cert=cert))


@operation()
def stage_enrollment(key: str, cert: str, password: str | None, hash_file: str, steps: str) -> Commands:
    """``mokutil --import`` of ``cert`` with the one-time ``password`` (its hash, root's copy at
    ``hash_file`` while mokutil reads it), unless mokutil finds it enrolled or already requested;
    without a password the ``steps`` are printed."""
    state = read(host, state_read(key, cert))
    if state["enrollment"] in ("enrolled", "pending"):
        host.noop(
            f"the module signing key {cert} is {'enrolled' if state['enrollment'] == 'enrolled' else 'requested for enrollment at the next boot'}"
        )
        return
    if password is None:
        logger.warning(f"{host.print_prefix}{steps}")
        host.noop("the module signing key's enrollment is the operator's (no module_signing_mok_password)")
        return
    staging = Staging.new(host, [Upload(hash_file, (password_hash(password) + "\n").encode())])
    yield from staging.commands()
    yield StringCommand(
        staging.place_script() + shell_scripts.script("module_signing_enroll", cert=cert, hash_file=hash_file)
    )
