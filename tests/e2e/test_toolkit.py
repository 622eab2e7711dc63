"""
The toolkit stage against a local signed apt repository holding a STAND-IN toolkit.

NVIDIA's repository is unreachable from the test machines (DESIGN.md section 5): the
repository here has its layout and four packages with its names, built and signed by
tests/standin_toolkit.py and served on 127.0.0.1. Everything else is real: apt, gpg
signature checks, dpkg holds, on a bookworm systemd node container.
"""

from __future__ import annotations

import standin_toolkit
from harness import assert_no_change

from deploy.tasks.toolkit import APT_KEYRING, APT_SOURCE, TOOLKIT_PACKAGES

TOOLKIT_ONLY = {"stages": "toolkit"}


def installed(node) -> dict[str, str]:
    out = node.sh(
        "dpkg-query -W -f '${Package} ${Version} ${Status}\\n' " + " ".join(TOOLKIT_PACKAGES) + " 2>/dev/null || true"
    ).stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if line.endswith(" installed")}


def test_standin_toolkit_unreachable_then_wrong_key_then_right_key_converges_pinned_and_held(node, toolkit_repo):
    dead_url = f"{standin_toolkit.refused_url()}/stable"
    unreachable = node.deploy(
        data={**TOOLKIT_ONLY, **toolkit_repo.data(), "nvidia_toolkit_gpgkey_url": f"{dead_url}/gpgkey"},
        json_output=False,
    )
    assert unreachable.returncode != 0
    assert f"{dead_url}/gpgkey" in unreachable.output, unreachable.explain()
    assert installed(node) == {}
    assert not node.exists(APT_SOURCE) and not node.exists(APT_KEYRING), "a failed fetch leaves no source behind"

    wrong_key = node.deploy(data={**TOOLKIT_ONLY, **toolkit_repo.data(wrong_key=True)}, json_output=False)
    assert wrong_key.returncode != 0
    assert "NO_PUBKEY" in wrong_key.output or "not signed" in wrong_key.output, wrong_key.explain()
    assert toolkit_repo.url in wrong_key.output
    assert installed(node) == {}, "apt must refuse a repository signed by another key"
    assert not node.exists(APT_SOURCE) and not node.exists(APT_KEYRING), "nor keep its source and key"

    data = {**TOOLKIT_ONLY, **toolkit_repo.data(version="1.17.7-1")}
    good = node.deploy(data=data)
    assert good.returncode == 0, good.explain()
    assert installed(node) == {name: "1.17.7-1" for name in TOOLKIT_PACKAGES}, "the pin must win over 1.17.8-1"
    assert set(node.sh("apt-mark showhold").stdout.split()) >= set(TOOLKIT_PACKAGES)
    source = node.read(APT_SOURCE)
    assert f"deb [signed-by={APT_KEYRING}] {toolkit_repo.url}/deb/$(ARCH) /" in source
    assert "trusted=yes" not in source
    assert node.read(APT_KEYRING) == (toolkit_repo.root / "gpgkey").read_text()
    assert node.sh("test -x /usr/bin/nvidia-container-runtime && nvidia-ctk --version").stdout.startswith(
        "NVIDIA Container Toolkit CLI version 1.17.7"
    )
    assert "apt-key" not in node.sh("ls /etc/apt/trusted.gpg.d/ 2>/dev/null; echo").stdout

    assert_no_change(node.deploy(data=data))

    upgraded = node.deploy(data={**TOOLKIT_ONLY, **toolkit_repo.data(version="1.17.8-1")})
    assert upgraded.returncode == 0, upgraded.explain()
    assert upgraded.changed_operations() == ["NVIDIA container toolkit | Install the NVIDIA container toolkit"]
    assert installed(node) == {name: "1.17.8-1" for name in TOOLKIT_PACKAGES}
    assert set(node.sh("apt-mark showhold").stdout.split()) >= set(TOOLKIT_PACKAGES), "still held after the move"
