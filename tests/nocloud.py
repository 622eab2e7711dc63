"""
Debian's cloud-init in node containers, seeded by NoCloud (docs/without-controller.md, "cloud-init"):
the image's cloud-init configuration for a container, the seed made of
docs/examples/cloud-init-pull.yaml with a site's values, and the site's wheels with their
requirements.txt. Shared by tests/e2e/test_without_controller_e2e.py and bench/pull_fleet.py.

NoCloud reads its seed from /var/lib/cloud/seed/nocloud (user-data and meta-data): cloud-init's
ds-identify finds it there at boot, so a folder bind-mounted read-only at that path is the node's seed,
as a CIDATA disk or a ``ds=nocloud`` kernel argument is a VM's (a container has neither).
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import yaml
from harness import REPO, Node, run
from wheels import REQUIREMENTS_RECIPE, dependency_wheels, gpu_node_wheel

SEED = "/var/lib/cloud/seed/nocloud"
EXAMPLE = REPO / "docs" / "examples" / "cloud-init-pull.yaml"
# What the image of a node container sets, beside Debian's own /etc/cloud/cloud.cfg.
CONTAINER_CONFIG_PATH = "/etc/cloud/cloud.cfg.d/90-node-container.cfg"
CONTAINER_CONFIG = """\
# A node container shares the machine's network and kernel: only the NoCloud seed is read (by
# default ds-identify probes every cloud it knows, from the machine's DMI, and a cloud's datasource
# asks its metadata address or runs DHCP), the network is left as it is, and there is no disk of its
# own to grow. The minimal image generates no locales: C.UTF-8 is built in.
datasource_list: [ NoCloud, None ]
network: {config: disabled}
growpart: {mode: "off"}
resize_rootfs: false
locale: C.UTF-8
"""
# The example's values a site replaces (its comments say so): the wheels' address and requirements.txt.
EXAMPLE_WHEELS_URL = "https://wheels.example.com/gpu-node/"
EXAMPLE_REQUIREMENT = "gpu_node==0.2.0 --hash=sha256:SHA256_OF_YOUR_GPU_NODE_WHEEL\n"
EXAMPLE_SETTINGS = 'container_runtimes = ["containerd"]\n'
SETTINGS_PATH = "/etc/gpu-node/settings.toml"
REQUIREMENTS_PATH = "/etc/gpu-node/requirements.txt"


def configure_image(builder: Node) -> None:
    """cloud-init's configuration for a node container, in an image being built (cloud-init installed)."""
    builder.write(CONTAINER_CONFIG_PATH, CONTAINER_CONFIG)


def commit(builder: Node, tag: str) -> str:
    """The builder's filesystem as an image that boots systemd (its volumes and bind mounts are not in it)."""
    run(["docker", "commit", "-c", 'CMD ["/sbin/init"]', builder.id, tag], timeout=600)
    return tag


def wheelhouse(folder: Path) -> str:
    """gpu-node's wheel and its dependencies' (tests/wheels.py) copied into ``folder``, to be served as a
    site hosts them; returns requirements.txt as docs/without-controller.md's recipe writes it."""
    folder.mkdir(parents=True)
    for wheel in [gpu_node_wheel(), *sorted(dependency_wheels().glob("*.whl"))]:
        shutil.copy(wheel, folder / wheel.name)
    run(["sh", "-c", f"set -e\nset -- *.whl\n{REQUIREMENTS_RECIPE}"], cwd=folder)
    requirements = folder / "requirements.txt"
    text = requirements.read_text()
    requirements.unlink()  # the folder is what the wheels' address serves
    return text


def _indented_block(text: str, indent: str = "      ") -> str:
    return "".join(indent + line for line in text.splitlines(keepends=True))


def site_user_data(*, wheels_url: str, requirements: str, settings: str, packages: bool = True) -> str:
    """docs/examples/cloud-init-pull.yaml as a site fills it in: its wheels' address, its
    requirements.txt, its settings (``settings`` added to the example's own). ``packages=False``: the
    example's apt lines left out, for an image that has python3-venv already (the benchmark's 64 nodes
    do not each ask Debian's mirror). Any other difference from the example is refused."""
    example_text = EXAMPLE.read_text()
    replacements = [
        (EXAMPLE_WHEELS_URL, wheels_url),
        (_indented_block(EXAMPLE_REQUIREMENT), _indented_block(requirements)),
        (_indented_block(EXAMPLE_SETTINGS), _indented_block(settings + EXAMPLE_SETTINGS)),
    ]
    text = example_text
    for old, new in replacements:
        assert text.count(old) == 1, f"{EXAMPLE.name} no longer holds {old!r} once"
        text = text.replace(old, new)
    if not packages:
        text = text.replace("package_update: true\npackages:\n  - python3-venv\n", "", 1)

    expected = yaml.safe_load(example_text)
    files = {entry["path"]: entry for entry in expected["write_files"]}
    files[SETTINGS_PATH]["content"] = settings + files[SETTINGS_PATH]["content"]
    kept = [
        line for line in files[REQUIREMENTS_PATH]["content"].splitlines(keepends=True) if line.lstrip().startswith("#")
    ]
    files[REQUIREMENTS_PATH]["content"] = "".join(kept) + requirements
    expected["runcmd"] = [
        [wheels_url if word == EXAMPLE_WHEELS_URL else word for word in command] for command in expected["runcmd"]
    ]
    if not packages:
        del expected["package_update"], expected["packages"]
    assert yaml.safe_load(text) == expected, "the site's user data differs from the example beyond the site's values"
    return text


def write_seed(folder: Path, user_data: str, *, instance_id: str, hostname: str) -> Path:
    """A NoCloud seed folder: user-data and meta-data (the instance's id and hostname)."""
    folder.mkdir(parents=True)
    (folder / "user-data").write_text(user_data)
    (folder / "meta-data").write_text(f"instance-id: {instance_id}\nlocal-hostname: {hostname}\n")
    for path in [folder, *folder.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def machine_identity() -> dict[str, object]:
    """What a node's cloud-init could change on the machine were it not kept to its own: the machine's
    hostname and name files, and its network (the node shares it, with CAP_NET_ADMIN): links, IPv4
    addresses and routes (fib_trie), IPv6 addresses and routes (less their reference and use counts)."""
    files = {
        name: Path(name).read_bytes()
        for name in ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf")
        if Path(name).exists()
    }
    ipv6_routes = [
        line.split()[:6] + line.split()[8:] for line in Path("/proc/net/ipv6_route").read_text().splitlines()
    ]
    return {
        "hostname": socket.gethostname(),
        **files,
        "links": sorted(os.listdir("/sys/class/net")),
        "ipv4": Path("/proc/net/fib_trie").read_text(),
        "ipv6": sorted(Path("/proc/net/if_inet6").read_text().split("\n")),
        "ipv6 routes": sorted(ipv6_routes),
    }
