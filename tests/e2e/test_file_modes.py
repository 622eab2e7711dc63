"""
Modes and owners of what the deploy writes, on a real bookworm node container: configs and
keyrings 0644 root:root, backups 0600 (a containerd config can hold registry credentials), and a
config the site had made unreadable to others stays so. The toolkit is the one
tests/toolkit_repo.py serves (the STAND-IN packages, or NVIDIA's debs from the opt-in lab); containerd
is Debian's, in the node image (its install is tests/e2e/test_containerd_e2e.py's subject).
"""

from __future__ import annotations

from harness import assert_no_change

from deploy.operations.safe_install import BACKUP_INFIX
from deploy.tasks.kernel import BLACKLIST_PATH, MODULES_LOAD_PATH, SYSCTL_PATH
from deploy.tasks.toolkit import APT_KEYRING, APT_SOURCE

CONFIG = "/etc/containerd/config.toml"
CREDENTIALS = """version = 2

[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example.internal".auth]
  username = "robot"
  password = "s3cr3t-PASSWORD-value"
"""


def mode_owner(node, path: str) -> str:
    return node.sh(f"stat -c '%a %U:%G' {path}").stdout.strip()


def backups(node) -> list[str]:
    return node.sh(f"ls {CONFIG}{BACKUP_INFIX}* 2>/dev/null || true").stdout.split()


def test_configs_and_keyrings_are_0644_root_and_backups_0600(containerd_node, toolkit_repo):
    node = containerd_node
    node.write(CONFIG, CREDENTIALS, mode="664")
    data = {"stages": "kernel,toolkit,runtimes", **toolkit_repo.data()}
    result = node.deploy(data=data)
    assert result.returncode == 0, result.explain()

    for path in (CONFIG, APT_KEYRING, APT_SOURCE, MODULES_LOAD_PATH, SYSCTL_PATH, BLACKLIST_PATH):
        assert mode_owner(node, path) == "644 root:root", path
    (backup,) = backups(node)
    assert mode_owner(node, backup) == "600 root:root"
    assert "s3cr3t-PASSWORD-value" in node.read(backup)  # kept, but for root's eyes only
    assert_no_change(node.deploy(data=data))


def test_a_config_the_site_made_private_stays_private(containerd_node, toolkit_repo):
    node = containerd_node
    node.write(CONFIG, CREDENTIALS, mode="600")
    data = {"stages": "toolkit,runtimes", **toolkit_repo.data()}
    result = node.deploy(data=data)
    assert result.returncode == 0, result.explain()
    assert mode_owner(node, CONFIG) == "600 root:root"
    assert "nvidia" in node.read(CONFIG) and "s3cr3t-PASSWORD-value" in node.read(CONFIG)
    (backup,) = backups(node)
    assert mode_owner(node, backup) == "600 root:root"
    assert_no_change(node.deploy(data=data))
