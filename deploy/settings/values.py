"""
The value types of the settings: what each allows, in words for the error line and docs/settings.md
(``Allowed``), and the checks behind them (URLs, paths, fingerprints, node names, versions). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args
from urllib.parse import urlparse

from pydantic import AfterValidator, BeforeValidator, SecretStr, StringConstraints

from ..foundations import batches
from ..rack import values as rack_values
from ..runtimes.registry import runtime_names


@dataclass(frozen=True)
class Allowed:
    """What a value type allows, in words: the error message and docs/settings.md show it."""

    text: str


# C0 controls, DEL and the C1 range: a newline in a value would start a new line in a config
# file or a shell script, NUL truncates arguments.
CONTROL = r"\x00-\x1f\x7f-\x9f"
CONTROL_CHARACTERS = re.compile(f"[{CONTROL}]")
# Characters a URL setting may not hold (besides control characters): whitespace and everything
# a shell, an apt source line or a .repo file gives a meaning to ('#' starts a comment there).
URL_FORBIDDEN = re.compile(r"[\s'\"\\`$;|&<>#]")
URL_ALLOWED = "no whitespace, quotes, backslashes, backticks or $ ; | & < > # (percent-encode them)"
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def whole(pattern: str) -> StringConstraints:
    """A string's constraint: it matches ``pattern`` as a whole."""
    return StringConstraints(pattern=f"^(?:{pattern})$")


REPOSITORY_URL = "an https:// URL (http:// needs allow_insecure_repositories=true)"
URL_OR_FILE = "an https:// URL or an absolute path to a file on the controller"
# Credentials in a URL land in files others read (apt sources, .repo files), in process lists and
# in logs: a mirror's credentials belong in the package manager's own auth files.
NO_USER_INFO = "without user:password@ (put a mirror's credentials in the package manager's own auth file)"


def checked_url(value: str, allowed: str, schemes: tuple[str, ...]) -> str:
    """``value`` as a URL with one of ``schemes``: a host for http(s), a path for file, no user-info."""
    if URL_FORBIDDEN.search(value) or CONTROL_CHARACTERS.search(value):
        raise ValueError(f"{allowed}, with {URL_ALLOWED}")
    try:
        parsed = urlparse(value)
        parsed.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as error:
        raise ValueError(f"{allowed} ({error})") from None
    if parsed.scheme not in schemes:
        raise ValueError(allowed)
    if "@" in parsed.netloc:
        raise ValueError(f"{allowed}, {NO_USER_INFO}")
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise ValueError(f"{allowed} (file:///absolute/path)")
    elif not parsed.hostname:
        raise ValueError(f"{allowed} (with a host: https://host/path)")
    return value


def repository_url(value: str) -> str:
    return checked_url(value, REPOSITORY_URL, ("https", "http", "file"))


FINGERPRINTS = "OpenPGP key fingerprints (40 hex digits each, spaces allowed), comma-separated"


def fingerprint_list(value: Any) -> tuple[str, ...]:
    """Fingerprints from a list or comma-separated text, as gpg --with-colons prints them: spaces
    folded out, upper case."""
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    folded = tuple(dict.fromkeys(str(item).replace(" ", "").upper() for item in items if str(item).strip()))
    if any(not re.fullmatch("[0-9A-F]{40}", each) for each in folded):
        raise ValueError(FINGERPRINTS)
    return folded


def https_url_or_path(value: str) -> str:
    if value.startswith("/"):
        if CONTROL_CHARACTERS.search(value):
            raise ValueError(f"{URL_OR_FILE} (a path without control characters)")
        return value
    return checked_url(value, URL_OR_FILE, ("https",))


NODE_MAPPING = "a mapping such as host1=node-a,host2=node-b"


def node_mapping(value: Any) -> tuple[tuple[str, str], ...]:
    """
    Inventory host name -> Kubernetes node name, from a dict or ``a=b,c=d`` on the command
    line; kept as sorted pairs (hashable). Node names reach kubectl: they must be node names.
    """
    if value is None or value == "":
        return ()
    if isinstance(value, (list, tuple)) and all(isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in value):
        value = dict(value)  # the pairs this returns
    if isinstance(value, Mapping):
        items = [(str(key).strip(), str(node).strip()) for key, node in value.items()]
    else:
        if any("=" not in item for item in str(value).split(",")):
            raise ValueError(NODE_MAPPING)
        items = [
            (key.strip(), node.strip()) for key, _, node in (item.partition("=") for item in str(value).split(","))
        ]
    if any(not key or CONTROL_CHARACTERS.search(key) for key, _ in items):
        raise ValueError(f"{NODE_MAPPING} (host names without control characters)")
    if any(len(node) > 253 or not NODE_NAME.fullmatch(node) for _, node in items):
        raise ValueError("host=node pairs whose node is a Kubernetes node name (lower case letters, digits, '-', '.')")
    return tuple(sorted(dict(items).items()))


AbsolutePath = Annotated[str, whole(f"/[^{CONTROL}]*"), Allowed("an absolute path without control characters")]
ControllerPath = Annotated[
    str, whole(f"[^{CONTROL}]+"), Allowed("a file path on the controller, without control characters")
]
DriverBranch = Annotated[str, whole("[0-9]{3}"), Allowed("a driver branch number such as 535 or 550")]
PackageVersion = Annotated[
    str, whole("[0-9][0-9A-Za-z.+~:_-]*"), Allowed("a package version such as 535.183.01 or 1.17.8-1")
]
# DKMS reads its framework config by sourcing it in bash: a path there holds no quote, space or $
SigningPath = Annotated[str, whole("/[A-Za-z0-9._+/-]+"), Allowed("an absolute path of letters, digits and . _ + - /")]


# A secret: pydantic shows it as '**********', and an error line never shows it (model.typed)
def _typeable(secret: SecretStr) -> SecretStr:
    """A password someone types at the MOK manager's prompt: no control character (a newline would end it)."""
    if CONTROL_CHARACTERS.search(secret.get_secret_value()):
        raise ValueError("1 to 256 characters without control characters (mokutil's bounds)")
    return secret


MokPassword = Annotated[
    SecretStr,
    StringConstraints(min_length=1, max_length=256),
    AfterValidator(_typeable),
    Allowed("1 to 256 characters without control characters (mokutil's bounds)"),
]
ImageReference = Annotated[
    str, whole("[a-z0-9][a-z0-9._/:@-]*"), Allowed("a container image reference such as registry/name:tag")
]
# A tag after the last "/" (a registry's port is no tag), then an optional digest: what a site pins.
PinnedImage = Annotated[
    str,
    whole(r"[a-z0-9][a-z0-9._/:-]*:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(@sha256:[0-9a-f]{64})?"),
    Allowed(
        "an image pinned by its tag, optionally with its digest, such as registry/name:v1.2@sha256:<64 hex digits>"
    ),
]


def _minor_from_number(value: Any) -> Any:
    """pyinfra reads ``--data x=1.30`` as JSON, the number 1.3: a Kubernetes minor has two digits (1.10 on)."""
    if isinstance(value, float):
        major, _, minor = repr(value).partition(".")
        return f"{major}.{minor.ljust(2, '0')}"
    return value


KubernetesMinor = Annotated[
    str,
    whole(r"v?1\.[1-9][0-9](\.[0-9]+)?"),
    Allowed("a Kubernetes version such as 1.30 (1.10 or later)"),
    BeforeValidator(_minor_from_number),
    AfterValidator(lambda version: ".".join(version.lstrip("v").split(".")[:2])),
]
ReleaseTag = Annotated[
    str,
    whole(r"v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?"),
    Allowed("a release such as v0.17.0"),
    AfterValidator(lambda tag: tag if tag.startswith("v") else f"v{tag}"),
]
BatchSizes = Annotated[str, AfterValidator(batches.checked_spec), Allowed(batches.ALLOWED)]
# systemd.time(7)'s time span units from seconds to weeks (what a check interval or an age needs)
TIME_SPAN_UNITS = {
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 604800),
}
_TIME_SPAN_PART = r"[0-9]{1,6} ?(?:" + "|".join(sorted(TIME_SPAN_UNITS, key=len, reverse=True)) + ")"


def time_span_seconds(span: str) -> int:
    """A systemd time span's seconds (``1h 30min``: 5400; a bare number is seconds)."""
    if span.strip().isdigit():
        return int(span)
    return sum(int(number) * TIME_SPAN_UNITS[unit] for number, unit in re.findall(r"([0-9]+) ?([a-z]+)", span))


TimeSpan = Annotated[
    str,
    whole(f"[0-9]{{1,6}}|{_TIME_SPAN_PART}( {_TIME_SPAN_PART})*"),
    Allowed("a systemd time span such as 1min, 90s or 1h 30min (units s, min, h, d, w)"),
    BeforeValidator(lambda value: str(value) if type(value) is int else value),
]
Sha256 = Annotated[
    str,
    whole("[0-9a-f]{64}"),
    Allowed("a SHA-256 digest (64 hex digits)"),
    BeforeValidator(lambda value: value.lower().removeprefix("sha256:") if isinstance(value, str) else value),
]
RepositoryUrl = Annotated[str, AfterValidator(repository_url), Allowed(REPOSITORY_URL)]
UrlOrFile = Annotated[str, AfterValidator(https_url_or_path), Allowed(URL_OR_FILE)]
Fingerprints = Annotated[tuple[str, ...], BeforeValidator(fingerprint_list), Allowed(FINGERPRINTS)]
NodeNames = Annotated[
    tuple[tuple[str, str], ...],
    BeforeValidator(node_mapping),
    Allowed(f"{NODE_MAPPING}, each node a Kubernetes node name"),
]

# A tri-state setting: pyinfra reads --data cdi=true as True.
Cdi = Annotated[
    Literal["auto", "true", "false"],
    BeforeValidator(lambda value: str(value).lower() if isinstance(value, bool) else value),
    Allowed("auto, true or false"),
]
AutoTrueFalse = Cdi  # the same tri-state for other settings (module_signing)
# The nvidia runtime's modes (`[nvidia-container-runtime] mode` in its config.toml).
RuntimeMode = Literal["auto", "cdi", "legacy", "csv"]

# Which runtimes gpu-node wires to the nvidia runtime: the runtimes' table's (deploy/runtimes/registry.py).
if TYPE_CHECKING:
    ContainerRuntime = str  # a Literal built from a table at run time is no type a checker can read
else:
    ContainerRuntime = Literal[runtime_names()]
# The driver's kernel module type (open or proprietary); auto: from the node's GPUs and the branch.
KernelModules = Literal["auto", "open", "proprietary"]

Stage = Literal["kernel", "driver", "toolkit", "runtimes", "verify"]
STAGES: tuple[Stage, ...] = get_args(Stage)


def ip_address(value: Any) -> str:
    address = rack_values.ip_address(str(value).strip()) if value is not None else None
    if address is None:
        raise ValueError("an IPv4 or IPv6 address")
    return address


IpAddress = Annotated[str, BeforeValidator(ip_address), Allowed("an IPv4 or IPv6 address")]
DomainName = Annotated[
    str, whole(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"), Allowed("a name: letters, digits, . _ -, at most 63")
]
MigLayout = Annotated[rack_values.MigLayout, BeforeValidator(rack_values.mig_layout), Allowed(rack_values.ALLOWED)]

GroupName = Annotated[
    str,
    whole(r"[A-Za-z_][A-Za-z0-9_-]*"),
    Allowed("an inventory group name: a letter or _, then letters, digits, _ or -"),
]


KEY_URL_SETTINGS = ("nvidia_toolkit_gpgkey_url", "nvidia_cuda_gpgkey_url", "nvidia_driver_gpgkey_url")
KEY_URL_ALLOWED = (
    "an https:// URL, or with allow_insecure_repositories=true a file:// path on the node (a key is "
    "never fetched over http://)"
)


def key_url_allowed(url: str, allow_file: bool = True) -> bool:
    """Whether a signing key may be fetched from ``url``: over https, or read from a file on the
    node, never over plain http (its fingerprint is checked wherever it comes from; this keeps a
    tampering network from even offering one)."""
    scheme = urlparse(url).scheme
    return scheme == "https" or (scheme == "file" and allow_file)
