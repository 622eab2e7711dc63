"""
A STAND-IN ``mokutil`` for node containers, written for these tests: a container has no EFI variables,
so the real mokutil can neither read Secure Boot's state nor stage a key's enrollment there. This one
answers the calls gpu-node makes with the real one's words (mokutil's --sb-state, --test-key,
--import, --list-new and --list-enrolled), from files under STATE instead of EFI variables:

- ``--sb-state``: "SecureBoot enabled" (STATE/secure-boot holds "enabled" or "disabled");
- ``--import CERT --hash-file FILE``: FILE's first line must be a SHA-512 crypt hash (what mokutil
  --generate-hash prints and MokManager checks at boot); CERT is copied to STATE/new/ (the
  enrollment request, MokNew), the hash kept beside it (STATE/new.hash). Without --hash-file the
  real one asks for a password on its input: the stand-in refuses instead;
- ``--test-key CERT``: "CERT is already enrolled" (a copy in STATE/enrolled/), "CERT is already in
  the enrollment request" (STATE/new/) or "CERT is not enrolled" (exit 1), as mokutil 0.6 prints.

``boot_confirming`` plays the next boot's MOK manager confirming the request: STATE/new/ moves to
STATE/enrolled/.
"""

from __future__ import annotations

STATE = "/var/lib/standin-mokutil"
PATH = "/usr/local/sbin/mokutil"  # before /usr/bin in root's PATH: the real package's binary is shadowed

SCRIPT = r"""#!/bin/sh
# STAND-IN mokutil (tests/standin_mokutil.py): EFI variables replaced by files under $state
state=__STATE__
mkdir -p "$state/new" "$state/enrolled"
same_as_one_in() { for held in "$1"/*; do [ -f "$held" ] && cmp -s "$held" "$2" && return 0; done; return 1; }
case "$1" in
  --sb-state)
    echo "SecureBoot $(cat "$state/secure-boot" 2>/dev/null || echo enabled)" ;;
  --test-key)
    if same_as_one_in "$state/enrolled" "$2"; then echo "$2 is already enrolled"
    elif same_as_one_in "$state/new" "$2"; then echo "$2 is already in the enrollment request"
    else echo "$2 is not enrolled"; exit 1; fi ;;
  --import)
    cert=$2
    [ "$3" = --hash-file ] && [ -n "$4" ] || { echo "stand-in mokutil: no --hash-file (the real one would ask on its input)" >&2; exit 2; }
    head -n 1 "$4" | grep -Eq '^\$6\$[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{86}$' || { echo "Failed to parse the password hash" >&2; exit 1; }
    openssl x509 -inform DER -in "$cert" -noout 2>/dev/null || { echo "Abort!!! $cert is not a valid x509 certificate in DER format" >&2; exit 1; }
    cp "$cert" "$state/new/" && head -n 1 "$4" > "$state/new.hash" ;;
  --list-new|--list-enrolled)
    folder=$state/new; [ "$1" = --list-enrolled ] && folder=$state/enrolled
    for held in "$folder"/*; do [ -f "$held" ] && openssl x509 -inform DER -in "$held" -noout -subject -serial; done ;;
  *)
    echo "stand-in mokutil: $1 is not stood in for" >&2; exit 2 ;;
esac
"""


def script() -> str:
    return SCRIPT.replace("__STATE__", STATE)


def install(node, secure_boot: str = "enabled") -> None:
    """The stand-in on ``node`` (before the real one in PATH), Secure Boot reading ``secure_boot``."""
    node.write(PATH, script(), mode="755")
    node.sh(f"mkdir -p {STATE} && echo {secure_boot} > {STATE}/secure-boot")


def boot_confirming(node) -> None:
    """The next boot's MOK manager, its request confirmed with the password: the keys are enrolled."""
    node.sh(f"mv {STATE}/new/* {STATE}/enrolled/ && rm -f {STATE}/new.hash")
