"""
STAND-IN rpm packages under the real names and versions of NVIDIA's CUDA repository (the driver's
module stream packages), NVIDIA's toolkit repository and Rocky Linux 9's own repositories, built
with the real rpmbuild and signed with rpmsign (in the RPM tool image, tests/family_images.py).

No registry ships NVIDIA's rpms, and none reaches Rocky's mirrors from here, so these are what the
RHEL-family e2e tests (tests/e2e/test_family_dnf.py) install with the real dnf. Each package's
summary says STAND-IN; its files are a few lines of text: the driver's ``nvidia-smi`` says it is a
stand-in and exits 9, as the real one does on a node without a driver; the toolkit's runtime logs
its call and execs runc (tests/standin_toolkit.py's scripts); no kernel module is built or loaded.
Every test that uses them says "standin" in its name.
"""

from __future__ import annotations

import re
import shlex
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import standin_toolkit
from apt_repo import GpgKey
from family_images import RPM_TOOLS, family_image
from harness import run

from deploy.tasks.toolkit import TOOLKIT_PACKAGES

ARCH = "x86_64"
DRIVER_EPOCH = 3  # NVIDIA's driver rpms carry epoch 3
DRIVER_RELEASE = "1.el9"
DRIVER_BRANCH = "550"
# Published from the start; a pin to the older one is observable against the newer one
DRIVER_VERSIONS = ("550.54.15", "550.90.07")
# Published later, for "a plain dnf upgrade leaves the held packages"
DRIVER_UPDATE = "550.127.05"
TOOLKIT_VERSIONS = ("1.17.8-1", "1.20.0-1")
TOOLKIT_UPDATE = "1.20.1-1"
STANDIN = "STAND-IN for gpu-node's tests, not the real {name}"


@dataclass(frozen=True)
class StandinRpm:
    name: str
    version: str
    release: str
    epoch: int | None = None
    arch: str = ARCH
    requires: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # path -> text; under bin/ executable

    @property
    def nevra(self) -> str:
        """name-epoch:version-release.arch, as module metadata lists its artifacts"""
        return f"{self.name}-{self.epoch or 0}:{self.version}-{self.release}.{self.arch}"

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.release}.{self.arch}.rpm"

    def spec(self, payload: str) -> str:
        lines = [
            f"Name: {self.name}",
            f"Version: {self.version}",
            f"Release: {self.release}",
            *([f"Epoch: {self.epoch}"] if self.epoch is not None else []),
            f"Summary: {STANDIN.format(name=self.name)}",
            "License: MIT",
            f"BuildArch: {self.arch}",
            # its requirements are the ones below: nothing of the Debian root is in rpm's database
            "AutoReqProv: no",
            *[f"Requires: {requirement}" for requirement in self.requires],
            "%description",
            f"{STANDIN.format(name=self.name)}: built by gpu-node's test suite (tests/standin_rpms.py).",
            "%install",
            f"cp -a {payload}/. %{{buildroot}}/",
            "%files",
            *[f'"{path}"' for path in sorted(self.files)],
            "",
        ]
        return "\n".join(lines)


def _smi_script(version: str) -> str:
    return textwrap.dedent(
        f"""\
        #!/bin/sh
        # STAND-IN nvidia-smi {version} (gpu-node tests): no driver is loaded, as on a node without a GPU
        echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver (STAND-IN {version})" >&2
        exit 9
        """
    )


PERSISTENCED_UNIT = textwrap.dedent(
    """\
    [Unit]
    Description=STAND-IN NVIDIA Persistence Daemon (gpu-node tests)

    [Service]
    Type=oneshot
    ExecStart=/usr/bin/nvidia-persistenced

    [Install]
    WantedBy=multi-user.target
    """
)


def driver_packages(version: str) -> list[StandinRpm]:
    """One driver version's packages in NVIDIA's CUDA repository for RHEL 9, its dependencies exact."""
    same = f"= {DRIVER_EPOCH}:{version}-{DRIVER_RELEASE}"

    def rpm(name, requires=(), files=None, epoch=DRIVER_EPOCH, release=DRIVER_RELEASE):
        files = files or {f"/usr/share/doc/{name}/STAND-IN": f"stand-in {version}\n"}
        return StandinRpm(name, version, release, epoch, requires=tuple(requires), files=files)

    return [
        rpm("nvidia-driver", files={"/usr/bin/nvidia-smi": _smi_script(version)}),
        rpm("nvidia-driver-cuda", [f"nvidia-driver {same}"]),
        rpm("kmod-nvidia-latest-dkms", [f"nvidia-driver {same}"]),
        rpm("kmod-nvidia-open-dkms", [f"nvidia-driver {same}"]),
        rpm(
            "nvidia-persistenced",
            files={
                "/usr/bin/nvidia-persistenced": "#!/bin/sh\n# STAND-IN nvidia-persistenced\nexit 0\n",
                "/usr/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT,
            },
        ),
        # the meta packages of the releases without the module (no epoch, release 1)
        rpm("cuda-drivers", [f"nvidia-driver-cuda {same}", f"kmod-nvidia-latest-dkms {same}"], epoch=None, release="1"),
        rpm(f"cuda-drivers-{DRIVER_BRANCH}", [f"cuda-drivers = {version}-1"], epoch=None, release="1"),
        rpm("nvidia-open", [f"nvidia-driver-cuda {same}", f"kmod-nvidia-open-dkms {same}"], epoch=None, release="1"),
        rpm(f"nvidia-open-{DRIVER_BRANCH}", [f"nvidia-open = {version}-1"], epoch=None, release="1"),
    ]


# The module's streams (NVIDIA's names) and the packages each carries
MODULE = "nvidia-driver"
MODULE_STREAMS = {
    "latest-dkms": ("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms", "nvidia-persistenced"),
    f"{DRIVER_BRANCH}-dkms": ("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-latest-dkms", "nvidia-persistenced"),
    "open-dkms": ("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-open-dkms", "nvidia-persistenced"),
    f"{DRIVER_BRANCH}-open": ("nvidia-driver", "nvidia-driver-cuda", "kmod-nvidia-open-dkms", "nvidia-persistenced"),
}


def modules_yaml(rpms: list[StandinRpm], module_version: int) -> str:
    """modulemd v2 documents of the ``nvidia-driver`` streams over ``rpms`` (no defaults document:
    a stream's packages are hidden until the deploy enables it). Needs platform el9, which dnf
    takes from os-release's PLATFORM_ID."""
    documents = []
    for stream, names in MODULE_STREAMS.items():
        artifacts = sorted(rpm.nevra for rpm in rpms if rpm.name in names)
        profile = [name for name in names if name != "nvidia-persistenced"]
        documents.append(
            "\n".join(
                [
                    "---",
                    "document: modulemd",
                    "version: 2",
                    "data:",
                    f"  name: {MODULE}",
                    f"  stream: {stream}",
                    f"  version: {module_version}",
                    "  context: 5e7d0b0c",
                    f"  arch: {ARCH}",
                    f"  summary: STAND-IN nvidia-driver module, stream {stream}",
                    "  description: STAND-IN module metadata built by gpu-node's test suite.",
                    "  license:",
                    "    module: [MIT]",
                    "  dependencies:",
                    "  - requires:",
                    "      platform: [el9]",
                    "  profiles:",
                    "    default:",
                    "      rpms: [" + ", ".join(profile) + "]",
                    "  artifacts:",
                    "    rpms:",
                    *[f"    - {nevra}" for nevra in artifacts],
                    "...",
                ]
            )
        )
    return "\n".join(documents) + "\n"


def toolkit_packages(version: str) -> list[StandinRpm]:
    """The toolkit's four packages at ``version`` (version-release), with the stand-in toolkit's
    scripts (tests/standin_toolkit.py) and its exact dependencies."""
    upstream, release = version.split("-", 1)
    rpms = []
    for name, (depends, files) in standin_toolkit._packages(version).items():
        # Debian's "name (= version)" is rpm's "name = version"
        requires = tuple(
            re.sub(r"(\S+) \(= ([^)]+)\)", r"\1 = \2", dep.strip()) for dep in depends.split(",") if dep.strip()
        )
        rpms.append(StandinRpm(name, upstream, release, requires=requires, files=files))
    assert {rpm.name for rpm in rpms} == set(TOOLKIT_PACKAGES)
    return rpms


def distribution_packages() -> list[StandinRpm]:
    """Rocky Linux 9's own packages the driver and toolkit stages install (BaseOS / AppStream / extras)."""

    def doc(name):
        return {f"/usr/share/doc/{name}/STAND-IN": "stand-in\n"}

    return [
        StandinRpm("epel-release", "9", "7.el9", arch="noarch", files=doc("epel-release")),
        StandinRpm("kernel-devel", "5.14.0", "362.8.1.el9_3", files=doc("kernel-devel")),
        # the node's dnf already has the plugin (Debian's dnf-plugins-core): this is its rpm record
        StandinRpm(
            "python3-dnf-plugin-versionlock",
            "4.3.0",
            "11.el9",
            arch="noarch",
            files=doc("python3-dnf-plugin-versionlock"),
        ),
    ]


def build(rpms: list[StandinRpm], out_dir: Path, key: GpgKey | None) -> list[Path]:
    """Build ``rpms`` into ``out_dir`` with rpmbuild (signed by ``key`` with rpmsign) in one
    container of the RPM tool image; returns the rpm files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="standin-rpms-") as workdir:
        work = Path(workdir)
        commands = []
        for index, rpm in enumerate(rpms):
            payload = work / f"payload-{index}"
            for path, text in rpm.files.items():
                target = payload / path.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
                target.chmod(0o755 if "/bin/" in path else 0o644)
            (work / f"{index}.spec").write_text(rpm.spec(f"/work/payload-{index}"))
            commands.append(
                f"rpmbuild --quiet -bb --define '_topdir /work/top' --define '_rpmdir /out' "
                f"--define '_build_name_fmt %%{{NAME}}-%%{{VERSION}}-%%{{RELEASE}}.%%{{ARCH}}.rpm' "
                f"--define 'debug_package %{{nil}}' /work/{index}.spec"
            )
        files = " ".join(shlex.quote(f"/out/{rpm.filename}") for rpm in rpms)
        if key:
            # Debian's rpm names gpg2 as its gpg
            commands.append(
                f"rpmsign --addsign --define '__gpg /usr/bin/gpg' --define '_gpg_path /gnupg' "
                f"--define '_gpg_name {key.fingerprint}' {files} >/dev/null"
            )
        volumes = ["-v", f"{work}:/work", "-v", f"{out_dir.resolve()}:/out"]
        if key:
            volumes += ["-v", f"{key.home.resolve()}:/gnupg"]
        result = run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "none",
                *volumes,
                family_image(RPM_TOOLS),
                "sh",
                "-c",
                "set -e\n" + "\n".join(commands),
            ],
            check=False,
            timeout=600,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"building the stand-in rpms failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
    if key:
        key.stop_agent()
    return [out_dir / rpm.filename for rpm in rpms]
