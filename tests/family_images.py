"""
Node images for the distribution families other than Debian: each runs the family's REAL package
manager, as Debian bookworm packages it, on the systemd bookworm node image (scripts/build-node-image.sh),
with the family's real os-release and that manager's configuration where the distribution keeps it.
docs/contributing.md ("Other families' package managers") says the same.

What is real and what is a stand-in, for the RHEL family (``ROCKY9_DNF``):

- REAL: dnf 4.14, its versionlock and config-manager plugins (Debian's dnf-plugins-core 4.3.1),
  rpm 4.18 with its database at /var/lib/rpm, systemd, gpg; /etc/os-release of Rocky Linux 9.3
  (tests/fixtures/nvidia/os-release/rocky-9, the file pyinfra's LinuxDistribution fact reads) and
  /etc/rocky-release; Rocky 9's /etc/dnf/dnf.conf; /etc/yum.repos.d; /etc/dnf/vars/releasever.
- STAND-IN: every rpm the node installs (NVIDIA's driver and toolkit packages, and Rocky's own
  epel-release, kernel-devel and python3-dnf-plugin-versionlock), built by tests/standin_rpms.py with
  the real rpmbuild under the real names and versions, and the repositories serving them
  (tests/rpm_repo.py). The files under / beside them are Debian's (dpkg's database holds them),
  and the kernel is the machine's: no real driver is built or loaded.

Each image is built once (``docker run`` of its recipe on the node image, then ``docker commit``)
and cached under a tag carrying a hash of its recipe and the node image's tag. The RPM
tool image (``RPM_TOOLS``: rpmbuild, rpmsign, createrepo_c, modifyrepo_c) builds the stand-ins;
the nodes never carry those tools. zypper (Debian's ``zypper``) and pacman
(``pacman-package-manager``) follow the same shape: a FamilyImage with their packages and files.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from build_lock import built_once
from harness import REPO, Node, node_image, run, sid_containerd_deb

OS_RELEASES = REPO / "tests" / "fixtures" / "nvidia" / "os-release"


@dataclass(frozen=True)
class FamilyImage:
    name: str
    # Debian packages that bring the family's package manager
    packages: tuple[str, ...]
    # path -> content, written into the image (the family's configuration)
    files: dict[str, str] = field(default_factory=dict)
    # shell run after the packages are in and the files written
    setup: str = ""
    os_release: str | None = None  # a file under tests/fixtures/nvidia/os-release

    def recipe(self) -> str:
        """Everything the image is made of, as one script (its hash names the image)."""
        lines = [
            "set -eu",
            "export DEBIAN_FRONTEND=noninteractive",
            "apt-get update -qq",
            f"apt-get install -y -qq --no-install-recommends {' '.join(self.packages)} >/dev/null",
        ]
        files = dict(self.files)
        if self.os_release:
            # /etc/os-release is a link to /usr/lib/os-release on Debian: both become the family's
            text = (OS_RELEASES / self.os_release).read_text()
            files["/usr/lib/os-release"] = text
            lines.append("rm -f /etc/os-release")
            files["/etc/os-release"] = text
        for path, content in files.items():
            lines.append(f"mkdir -p {shlex.quote(str(Path(path).parent))}")
            lines.append(f"printf %s {shlex.quote(content)} > {shlex.quote(path)}")
        lines += [self.setup, "apt-get clean", "rm -rf /var/lib/apt/lists/*"]
        return "\n".join(line for line in lines if line)


# Rocky Linux 9's own /etc/dnf/dnf.conf (dnf-data)
ROCKY9_DNF_CONF = """\
[main]
gpgcheck=1
installonly_limit=3
clean_requirements_on_remove=True
best=True
skip_if_unavailable=False
"""
ROCKY9_RELEASE = "Rocky Linux release 9.3 (Blue Onyx)\n"

ROCKY9_DNF = FamilyImage(
    name="rocky9-dnf",
    packages=("dnf", "dnf-plugins-core", "rpm"),
    os_release="rocky-9",
    files={
        "/etc/dnf/dnf.conf": ROCKY9_DNF_CONF,
        # dnf takes $releasever from the installed release package; the stand-in has none
        "/etc/dnf/vars/releasever": "9\n",
        # Debian's rpm keeps a database per user (~/.rpmdb); RHEL's is /var/lib/rpm
        "/etc/rpm/macros.dbpath": "%_dbpath /var/lib/rpm\n",
        "/etc/rocky-release": ROCKY9_RELEASE,
    },
    setup="\n".join(
        [
            "mkdir -p /etc/yum.repos.d /etc/pki/rpm-gpg",
            "ln -sf rocky-release /etc/redhat-release && ln -sf rocky-release /etc/system-release",
            # Debian enables dnf's "local" plugin (a repository of every installed rpm); Rocky has none
            "sed -i 's/^enabled *=.*/enabled = 0/' /etc/dnf/plugins/local.conf",
            "rpm --initdb",
        ]
    ),
)

RPM_TOOLS = FamilyImage(
    name="rpm-tools",
    packages=("rpm", "createrepo-c", "gnupg"),
)

# Not a family: the bookworm node image with Debian's containerd 1.6 (and runc) installed, as
# `apt-get install containerd` leaves a node (enabled; it starts when the node boots), for the tests whose
# subject is not containerd's install: one install per run instead of one per test.
BOOKWORM_CONTAINERD = FamilyImage(name="bookworm-containerd", packages=("containerd",))


def image_tag(spec: FamilyImage, base: str) -> str:
    digest = hashlib.sha256("\n".join([spec.recipe(), base]).encode()).hexdigest()[:12]
    return f"gpu-node-test/node-{spec.name}:{digest}"


def committed_image(
    tag: str, base: str, recipe: str, network: str = "host", timeout: int = 900, copy_in: dict[Path, str] | None = None
) -> str:
    """``tag``, made the first time by running ``recipe`` in a container of ``base`` (``copy_in``: files of
    this machine put there first, path -> path inside) and committing it."""
    with built_once(tag):
        if run(["docker", "image", "inspect", tag], check=False).returncode != 0:
            _commit_recipe(tag, base, recipe, network, timeout, copy_in or {})
    return tag


def _commit_recipe(tag: str, base: str, recipe: str, network: str, timeout: int, copy_in: dict[Path, str]) -> None:
    container = run(["docker", "create", "--network", network, base, "sh", "-c", recipe]).stdout.strip()
    try:
        for source, inside in copy_in.items():
            run(["docker", "cp", str(source), f"{container}:{inside}"])
        started = run(["docker", "start", "-a", container], check=False, timeout=timeout)
        if started.returncode != 0:
            raise AssertionError(f"building {tag} failed:\n{started.stdout[-3000:]}\n{started.stderr[-3000:]}")
        run(["docker", "commit", "-c", 'CMD ["/sbin/init"]', container, tag])
    finally:
        run(["docker", "rm", "-f", container], check=False)


def family_image(spec: FamilyImage) -> str:
    """The image of ``spec``, built on the node image the first time (about a minute); its tag."""
    base = node_image()
    return committed_image(image_tag(spec, base), base, spec.recipe())


def sid_containerd_image() -> str:
    """The node image with sid's containerd 2.1 installed from its .deb (tests/containerd_releases.py; runc
    and the rest from bookworm), as `apt-get install ./containerd_2.1….deb` leaves a node, for the tests
    whose subject is not that install. The .deb's name (its version) is part of the recipe, so of the tag."""
    deb = sid_containerd_deb()
    inside = f"/tmp/{deb.name}"
    spec = FamilyImage(name="bookworm-sid-containerd", packages=(inside,), setup=f"rm {shlex.quote(inside)}")
    base = node_image()
    return committed_image(image_tag(spec, base), base, spec.recipe(), copy_in={deb: inside})


def family_node(spec: FamilyImage) -> Node:
    """A node container of ``spec``'s image (not started); the apt download cache is Debian's only."""
    return Node(image=family_image(spec), share_apt_cache=False)


def rpm_installed(node: Node, names) -> dict[str, str]:
    """name -> version-release, for those of ``names`` the node's rpm database has."""
    out = node.sh(
        "rpm -q --qf '%{NAME} %{VERSION}-%{RELEASE}\\n' " + " ".join(names) + " | grep -v 'not installed'", check=False
    ).stdout
    return dict(line.split() for line in out.splitlines())


if __name__ == "__main__":
    # Build (or find) the images by hand: python tests/family_images.py
    for each in (ROCKY9_DNF, RPM_TOOLS, BOOKWORM_CONTAINERD):
        print(family_image(each))
