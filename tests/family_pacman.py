"""
The Arch family run by its real package manager: a node image (Debian bookworm's
``pacman-package-manager`` 6.0.2 and Arch's os-release) and local signed pacman repositories on
127.0.0.1 holding STAND-IN packages under Arch's real names, built with the real makepkg (as a
non-root build user: makepkg refuses root), signed with ``makepkg --sign`` and indexed with
``repo-add --sign`` (the databases' detached signatures, what ``DatabaseRequired`` checks).

REAL: pacman 6.0.2 and libalpm with its gpgme signature checks, pacman-key and its keyring under
/etc/pacman.d/gnupg (``--init``, ``--add``, ``--lsign-key``, as archlinux-keyring's populate does
for Arch's own keys), makepkg and repo-add; /etc/os-release of Arch Linux
(tests/fixtures/nvidia/os-release/arch); /etc/pacman.conf with Arch's options and its ``core`` and
``extra`` repositories, each with ``SigLevel = Required DatabaseRequired``.

STAND-IN: every package (``nvidia-utils``, ``nvidia``, ``nvidia-dkms``, ``nvidia-open``,
``nvidia-open-dkms``, ``dkms``, ``linux``, ``linux-headers``, ``libnvidia-container``,
``nvidia-container-toolkit``): a few lines of text each, every ``pkgdesc`` says STAND-IN; the
driver's ``nvidia-smi`` exits 9 as on a node without a driver; the toolkit's scripts are
tests/standin_toolkit.py's. The repositories serving them, the mirrorlist naming them, and the
node's kernel: the container runs the machine's, so the node gets
``/usr/lib/modules/$(uname -r)/pkgbase`` saying ``linux`` at start (what Arch's ``linux`` package
ships), and the stand-in ``linux`` package installed then is a record in pacman's database only.

Three served trees, as Arch mirrors lay them out (``<tree>/$repo/os/$arch``), one key:

- ``main``: the driver at DRIVER_VERSION, the toolkit at TOOLKIT_VERSION;
- ``moved``: the same mirror after Arch moved on (DRIVER_UPDATE, TOOLKIT_UPDATE; an Arch mirror
  keeps only the current file of a package);
- ``tampered``: ``main`` with ``nvidia-container-toolkit``'s package rebuilt after signing, its
  original signature kept (the database, signed, names the new file's checksum).
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import standin_toolkit
from apt_repo import GpgKey, make_key, serve
from family_images import FamilyImage, family_image, family_node
from harness import run
from standin_rpms import PERSISTENCED_UNIT

ARCH = "x86_64"
PKGEXT = ".pkg.tar.zst"  # Arch's
DRIVER_VERSION = "550.78-1"
DRIVER_UPDATE = "550.90.07-1"
TOOLKIT_VERSION = "1.17.8-1"
TOOLKIT_UPDATE = "1.20.0-1"
KERNEL_VERSION = "6.9.7.arch1-1"
TREES = ("main", "moved", "tampered")
TAMPERED_PACKAGE = "nvidia-container-toolkit"
MIRRORLIST = "/etc/pacman.d/mirrorlist"
# Arch's hosts a node may name (mirrors, keyservers): they resolve to 127.0.0.1 on the node
REAL_HOSTS = (
    "geo.mirror.pkgbuild.com",
    "mirror.pkgbuild.com",
    "archlinux.org",
    "keyserver.ubuntu.com",
    "keys.openpgp.org",
    "openpgpkey.archlinux.org",
)

# Arch's /etc/pacman.conf options (pacman's own package), the repositories' signature levels strict
ARCH_PACMAN_CONF = """\
[options]
HoldPkg     = pacman glibc
Architecture = auto
CheckSpace
ParallelDownloads = 5
SigLevel    = Required DatabaseOptional
LocalFileSigLevel = Optional

[core]
SigLevel = Required DatabaseRequired
Include = /etc/pacman.d/mirrorlist

[extra]
SigLevel = Required DatabaseRequired
Include = /etc/pacman.d/mirrorlist
"""

ARCH_PACMAN = FamilyImage(
    name="arch-pacman",
    # Debian's pacman-key sources makepkg's shell library (Arch's pacman package carries both)
    packages=("pacman-package-manager", "makepkg", "gnupg"),
    os_release="arch",
    files={
        "/etc/pacman.conf": ARCH_PACMAN_CONF,
        # written again with the served URL when a node starts
        MIRRORLIST: "Server = http://127.0.0.1:9/$repo/os/$arch\n",
    },
    setup="\n".join(
        [
            "mkdir -p /var/lib/pacman/sync /var/cache/pacman/pkg",
            "pacman-key --init >/dev/null 2>&1",
            # key look-ups (an unknown signer) stay on this machine
            "echo 'keyserver hkp://127.0.0.1:9' >> /etc/pacman.d/gnupg/gpg.conf",
            "gpgconf --homedir /etc/pacman.d/gnupg --kill all",
        ]
    ),
)

PACMAN_TOOLS = FamilyImage(
    name="pacman-tools",
    packages=("pacman-package-manager", "makepkg", "libarchive-tools", "zstd", "gnupg", "fakeroot"),
    setup="useradd --create-home builder",
)

STANDIN = "STAND-IN for gpu-node's tests, not Arch's {name}"


@dataclass(frozen=True)
class StandinPackage:
    name: str
    version: str  # pkgver-pkgrel
    depends: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # path -> text; under bin/ executable

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{ARCH}{PKGEXT}"

    def pkgbuild(self) -> str:
        pkgver, pkgrel = self.version.rsplit("-", 1)

        def words(values):
            return " ".join(shlex.quote(value) for value in values)

        lines = [
            f"pkgname={self.name}",
            f"pkgver={pkgver}",
            f"pkgrel={pkgrel}",
            f"pkgdesc={shlex.quote(STANDIN.format(name=self.name))}",
            f"arch=({ARCH})",
            "license=(MIT)",
            "options=(!strip !debug)",
            f"depends=({words(self.depends)})",
            f"conflicts=({words(self.conflicts)})",
            "package() {",
            '  cp -a "$startdir/payload/." "$pkgdir/"',
            "}",
        ]
        return "\n".join(lines) + "\n"


def _smi(version: str) -> str:
    return textwrap.dedent(f"""\
        #!/bin/sh
        # STAND-IN nvidia-smi {version} (gpu-node tests): no driver is loaded, as on a node without a GPU
        echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver (STAND-IN {version})" >&2
        exit 9
        """)


def _doc(name: str, version: str) -> dict[str, str]:
    return {f"/usr/share/doc/{name}/STAND-IN": f"stand-in {version}\n"}


def driver_packages(version: str) -> list[StandinPackage]:
    """Arch's driver packages at ``version``: the userspace, the prebuilt modules for ``linux``
    (proprietary and open) and the DKMS sources of both, each module package at the userspace's version."""
    pkgver = version.rsplit("-", 1)[0]
    utils = f"nvidia-utils={pkgver}"
    return [
        StandinPackage(
            "nvidia-utils",
            version,
            files={
                "/usr/bin/nvidia-smi": _smi(pkgver),
                "/usr/bin/nvidia-persistenced": "#!/bin/sh\n# STAND-IN nvidia-persistenced\nexit 0\n",
                "/usr/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT,
            },
        ),
        StandinPackage("nvidia", version, (utils, "linux"), ("nvidia-open",), _doc("nvidia", version)),
        StandinPackage("nvidia-open", version, (utils, "linux"), ("nvidia",), _doc("nvidia-open", version)),
        StandinPackage("nvidia-dkms", version, (utils, "dkms"), ("nvidia-open-dkms",), _doc("nvidia-dkms", version)),
        StandinPackage(
            "nvidia-open-dkms", version, (utils, "dkms"), ("nvidia-dkms",), _doc("nvidia-open-dkms", version)
        ),
    ]


def toolkit_packages(version: str) -> list[StandinPackage]:
    """Arch's two toolkit packages (its ``extra`` repository): ``libnvidia-container`` (the library
    and nvidia-container-cli) and ``nvidia-container-toolkit`` (nvidia-ctk, the runtime and its hook),
    with tests/standin_toolkit.py's scripts."""
    parts = {name: files for name, (_, files) in standin_toolkit._packages(version).items()}
    pkgver = version.rsplit("-", 1)[0]
    return [
        StandinPackage(
            "libnvidia-container",
            version,
            files={**parts["libnvidia-container1"], **parts["libnvidia-container-tools"]},
        ),
        StandinPackage(
            "nvidia-container-toolkit",
            version,
            (f"libnvidia-container={pkgver}",),
            files={**parts["nvidia-container-toolkit-base"], **parts["nvidia-container-toolkit"]},
        ),
    ]


def distribution_packages() -> dict[str, list[StandinPackage]]:
    """Arch's own packages the driver's names depend on, by repository."""
    return {
        "core": [
            StandinPackage("linux", KERNEL_VERSION, files=_doc("linux", KERNEL_VERSION)),
            StandinPackage("linux-headers", KERNEL_VERSION, files=_doc("linux-headers", KERNEL_VERSION)),
        ],
        "extra": [StandinPackage("dkms", "3.0.13-1", files=_doc("dkms", "3.0.13"))],
    }


def tree_packages(driver: str, toolkit: str) -> dict[str, list[StandinPackage]]:
    own = distribution_packages()
    return {"core": own["core"], "extra": own["extra"] + driver_packages(driver) + toolkit_packages(toolkit)}


def _build_script(trees: dict[str, dict[str, list[StandinPackage]]], key: GpgKey, tampered: str) -> str:
    """One shell script for the tool image: makepkg --sign of each package as ``builder``, then
    repo-add --sign of each tree's repositories (the ``tampered`` tree's package rebuilt after signing)."""
    fpr = key.fingerprint
    lines = [
        "set -eu",
        "cp -a /gnupg /home/builder/gnupg && cp -a /work /home/builder/work",
        "chown -R builder /home/builder",
        "export GNUPGHOME=/home/builder/gnupg",
        f'as_builder() {{ su builder -c "export GNUPGHOME=$GNUPGHOME PKGEXT={PKGEXT} GPGKEY={fpr}; $1"; }}',
    ]
    built: dict[tuple[str, str], str] = {}  # a package built once is copied to the other trees
    for tree, repos in trees.items():
        for repo, packages in repos.items():
            out = f"/home/builder/out/{tree}/{repo}/os/{ARCH}"
            lines.append(f"as_builder 'mkdir -p {out}'")
            for package in packages:
                build = f"/home/builder/work/{tree}/{repo}/{package.name}"
                first = built.setdefault((package.name, package.version), out)
                if first != out:
                    lines.append(f"as_builder 'cp {first}/{package.filename} {first}/{package.filename}.sig {out}/'")
                else:
                    lines.append(
                        f"as_builder 'cd {build} && makepkg --nodeps --sign --noconfirm >/tmp/makepkg.log 2>&1"
                        " || { cat /tmp/makepkg.log >&2; exit 1; }"
                        f" && mv {package.filename} {package.filename}.sig {out}/'"
                    )
                if tree == "tampered" and package.name == tampered:
                    # the same package with other content, keeping the first build's signature
                    lines.append(
                        f"as_builder 'cd {build} && echo altered >> payload/usr/bin/nvidia-ctk"
                        f" && makepkg --nodeps --noconfirm -f >/dev/null 2>&1 && mv {package.filename} {out}/'"
                    )
            files = " ".join(package.filename for package in packages)
            lines.append(f"as_builder 'cd {out} && repo-add --quiet --sign --key {fpr} {repo}.db.tar.gz {files}'")
    lines.append("cp -a /home/builder/out/. /out/")
    return "\n".join(lines)


def build_trees(root: Path, key: GpgKey) -> None:
    """The three trees (TREES) under ``root``, built and signed in one container of the tool image."""
    trees = {
        "main": tree_packages(DRIVER_VERSION, TOOLKIT_VERSION),
        "moved": tree_packages(DRIVER_UPDATE, TOOLKIT_UPDATE),
        "tampered": tree_packages(DRIVER_VERSION, TOOLKIT_VERSION),
    }
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="standin-pacman-") as workdir:
        work = Path(workdir)
        for tree, repos in trees.items():
            for repo, packages in repos.items():
                for package in packages:
                    build = work / tree / repo / package.name
                    (build / "payload").mkdir(parents=True)
                    (build / "PKGBUILD").write_text(package.pkgbuild())
                    for path, text in package.files.items():
                        target = build / "payload" / path.lstrip("/")
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_text(text)
                        target.chmod(0o755 if "/bin/" in path else 0o644)
        script = _build_script(trees, key, TAMPERED_PACKAGE)
        result = run(
            [
                "docker",
                "run",
                "--rm",
                "--network",
                "none",
                "-v",
                f"{work}:/work:ro",
                "-v",
                f"{key.home.resolve()}:/gnupg:ro",
                "-v",
                f"{root.resolve()}:/out",
                family_image(PACMAN_TOOLS),
                "sh",
                "-c",
                script,
            ],
            check=False,
            timeout=600,
        )
    if result.returncode != 0:
        raise AssertionError(
            f"building the stand-in pacman packages failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )


@dataclass
class ArchRepos:
    root: Path
    key: GpgKey
    url: str = ""

    def mirror(self, tree: str) -> str:
        return f"{self.url}/{tree}/$repo/os/$arch"

    def point(self, node, tree: str) -> None:
        """The node's mirrorlist names ``tree``'s mirror (as an operator's change of mirror would)."""
        node.write(MIRRORLIST, f"Server = {self.mirror(tree)}\n")

    def node_setup(self, node, tree: str = "main") -> None:
        """What an installed Arch node has: the repositories' key trusted in pacman's keyring, its
        mirror, the running kernel's pkgbase (``linux``) and package databases synced from its mirror."""
        node.sh(f"printf '127.0.0.1 %s\\n' {' '.join(REAL_HOSTS)} >> /etc/hosts")
        node.write("/tmp/standin-arch-key.asc", self.key.armored_public_key())
        node.sh(
            "pacman-key --add /tmp/standin-arch-key.asc >/dev/null 2>&1"
            f" && pacman-key --lsign-key {self.key.fingerprint} >/dev/null 2>&1"
        )
        node.sh('mkdir -p "/usr/lib/modules/$(uname -r)" && echo linux > "/usr/lib/modules/$(uname -r)/pkgbase"')
        self.point(node, tree)
        # an Arch node has its kernel's package installed (here a record only: the kernel is the machine's)
        node.sh("pacman -Sy >/dev/null 2>&1 && pacman --noconfirm -S linux >/dev/null 2>&1", check=False)


@contextlib.contextmanager
def served(root: Path):
    """Build the trees under ``root`` and serve them on 127.0.0.1; yields the ArchRepos with its ``url``."""
    keys = root.parent / f"{root.name}-gnupg"
    key = make_key(keys, "standin-arch")
    key.stop_agent()
    build_trees(root, key)
    repos = ArchRepos(root=root, key=key)
    with serve(root) as url:
        repos.url = url
        try:
            yield repos
        finally:
            shutil.rmtree(keys, ignore_errors=True)


def arch_node():
    return family_node(ARCH_PACMAN)


if __name__ == "__main__":
    # Build (or find) the images by hand: python tests/family_pacman.py
    for each in (ARCH_PACMAN, PACMAN_TOOLS):
        print(family_image(each))
