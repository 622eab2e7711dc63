"""
The toolkit stage against local signed apt repositories with NVIDIA's layout, served on 127.0.0.1:
apt, gpg signature checks and dpkg holds are real, on a bookworm systemd node container.

The first test installs the toolkit tests/toolkit_repo.py serves: the STAND-IN packages (test id
``standin-toolkit``; no registry ships the toolkit) or NVIDIA's own debs from the opt-in lab
(``real-toolkit``). The second reads what only NVIDIA's packages do (their postinst and
descriptions) and runs with the lab only. The third needs what one version cannot show, several
versions for a pin move and a key that did not sign the repository: the STAND-IN repository of
tests/standin_toolkit.py.
"""

from __future__ import annotations

import standin_toolkit
import toolkit_repo as served
from harness import assert_no_change

from deploy.tasks.toolkit import APT_KEYRING, APT_SOURCE, TOOLKIT_PACKAGES

TOOLKIT_ONLY = {"stages": "toolkit"}


def installed(node) -> dict[str, str]:
    out = node.sh(
        "dpkg-query -W -f '${Package} ${Version} ${Status}\\n' " + " ".join(TOOLKIT_PACKAGES) + " 2>/dev/null || true"
    ).stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if line.endswith(" installed")}


def described(node, package: str) -> str:
    return node.sh(f"dpkg-query -W -f '${{Description}}' {package}").stdout.splitlines()[0]


def test_toolkit_1_20_installs_pinned_and_held_its_binaries_answer_and_reruns_unchanged(node, toolkit_repo):
    """Toolkit 1.20.0, pinned: all four packages at the pin, held, from the signed source; the
    installed nvidia-ctk and nvidia-container-runtime answer with that version. The stand-in's
    packages say STAND-IN in their descriptions."""
    data = {**TOOLKIT_ONLY, **toolkit_repo.data(version=toolkit_repo.version)}
    first = node.deploy(data=data)
    assert first.returncode == 0, first.explain()
    assert installed(node) == {name: toolkit_repo.version for name in TOOLKIT_PACKAGES}
    assert set(node.sh("apt-mark showhold").stdout.split()) >= set(TOOLKIT_PACKAGES)
    assert f"deb [signed-by={APT_KEYRING}] {toolkit_repo.url}/deb/$(ARCH) /" in node.read(APT_SOURCE)
    assert node.read(APT_KEYRING) == (toolkit_repo.root / "gpgkey").read_text()

    assert node.sh("nvidia-ctk --version").stdout.startswith("NVIDIA Container Toolkit CLI version 1.20.0")
    # No runc yet (toolkit stage only): the runtime prints its version, then fails to find runc.
    runtime = node.sh("nvidia-container-runtime --version", check=False)
    assert runtime.stdout.startswith("NVIDIA Container Runtime version 1.20.0"), runtime
    if toolkit_repo.kind == served.STANDIN:
        for package in TOOLKIT_PACKAGES:
            assert described(node, package).startswith("STAND-IN"), package

    assert_no_change(node.deploy(data=data))


def test_real_toolkit_packages_are_nvidias_and_their_postinst_configured_the_runtime(node, real_toolkit_repo):
    """NVIDIA's own debs (lab only): their descriptions are NVIDIA's, the base package's postinst
    ran the real nvidia-ctk over the runtime's config, and libnvidia-container's CLI is there."""
    first = node.deploy(data={**TOOLKIT_ONLY, **real_toolkit_repo.data(version=real_toolkit_repo.version)})
    assert first.returncode == 0, first.explain()
    assert node.sh("nvidia-ctk --version").stdout.splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.20.0"
    assert 'mode = "auto"' in node.read(served.RUNTIME_CONFIG)
    for package in ("nvidia-container-toolkit", "nvidia-container-toolkit-base"):
        assert described(node, package).startswith("NVIDIA Container"), package
    assert node.exists("/usr/bin/nvidia-container-cli")


def test_standin_toolkit_unreachable_then_wrong_key_then_right_key_converges_pinned_and_held(
    node, standin_toolkit_repo
):
    """STAND-IN repository: a key that did not sign it and two versions (1.17.7-1, 1.17.8-1) for a
    pin and a pin move, which the one real version cannot show."""
    toolkit_repo = standin_toolkit_repo
    dead_url = f"{standin_toolkit.refused_url('https')}/stable"
    unreachable = node.deploy(
        data={**TOOLKIT_ONLY, **toolkit_repo.data(), "nvidia_toolkit_gpgkey_url": f"{dead_url}/gpgkey"},
        json_output=False,
    )
    assert unreachable.returncode != 0
    assert f"{dead_url}/gpgkey" in unreachable.output, unreachable.explain()
    assert installed(node) == {}
    assert not node.exists(APT_SOURCE) and not node.exists(APT_KEYRING), "a failed fetch leaves no source behind"

    # a key that did not sign the repository, pinned: apt's own check refuses the repository
    also_pinned = {
        "nvidia_toolkit_gpgkey_fingerprint": f"{toolkit_repo.key.fingerprint},{toolkit_repo.other_key.fingerprint}"
    }
    wrong_key = node.deploy(
        data={**TOOLKIT_ONLY, **toolkit_repo.data(wrong_key=True), **also_pinned}, json_output=False
    )
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
