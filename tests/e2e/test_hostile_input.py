"""
Hostile or broken settings and credentials in existing configs, on real bookworm node containers.

- Values with shell metacharacters are refused by validation before any host is touched, or,
  where such characters are legitimate (a path), reach the node only quoted: /tmp/pwned never
  appears, on the node or on the controller.
- A config.toml holding registry credentials is wired with ``--diff -v``: the diff shows the
  nvidia runtime lines and never the password, which stays in the file as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import assert_no_change

PWNED = "/tmp/pwned"
CONFIG = "/etc/containerd/config.toml"
PASSWORD = "s3cr3t-PASSWORD-value"
AUTH = "Ym9iOnMzY3IzdC1QQVNTV09SRC12YWx1ZQ=="

# A containerd 1.6 config with registry credentials, laid out as containerd's documentation shows.
CREDENTIALS_CONFIG = f"""version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"

  [plugins."io.containerd.grpc.v1.cri".registry]
    # the site's private registry
    [plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".auth]
      username = "bob"
      password = "{PASSWORD}"
      auth = "{AUTH}"

    [plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".tls]
      insecure_skip_verify = false
"""

HOSTILE = [
    ("nvidia_driver_version", "535; touch /tmp/pwned"),
    ("nvidia_toolkit_version", "1.17.8-1$(touch /tmp/pwned)"),
    ("nvidia_toolkit_repo_url", "https://127.0.0.1:9/stable touch /tmp/pwned"),
    ("nvidia_toolkit_repo_url", "https://127.0.0.1:9/stable'; touch /tmp/pwned; '"),
    ("nvidia_toolkit_gpgkey_url", 'https://127.0.0.1:9/gpgkey"`touch /tmp/pwned`'),
    ("containerd_config_path", "/etc/containerd/config.toml\ntouch /tmp/pwned"),
    ("containerd_version", "1.6.20|touch /tmp/pwned"),
    ("kube_node_names", "node=gpu1;touch /tmp/pwned"),
    ("verify_report_path", "report.json\ntouch /tmp/pwned"),
]


def node_fingerprint(node) -> str:
    """Every file under /etc, the package database and /tmp: equal before and after means untouched."""
    return node.sh(
        "find /etc /tmp -xdev \\( -type f -o -type l \\) -printf '%p %s %T@\\n' | sort | sha256sum;"
        " sha256sum /var/lib/dpkg/status; ls /var/lib/apt/lists | sha256sum"
    ).stdout


def assert_not_pwned(node) -> None:
    assert not node.exists(PWNED), "a setting ran as a shell command on the node"
    assert not Path(PWNED).exists(), "a setting ran as a shell command on the controller"


@pytest.fixture
def clean_controller():
    assert not Path(PWNED).exists(), f"{PWNED} exists on the controller before the test: remove it first"


def test_hostile_values_stop_the_run_naming_the_key_before_any_change(node, clean_controller):
    assert_not_pwned(node)
    before = node_fingerprint(node)
    for key, value in HOSTILE:
        result = node.deploy(data={key: value, "stages": "kernel,driver,toolkit,runtimes"}, json_output=False)
        assert result.returncode != 0, result.explain()
        errors = [line for line in result.run_output.splitlines() if f"invalid setting {key}=" in line]
        assert errors, f"{key}={value!r} was not refused by name:\n{result.explain()}"
        assert "allowed:" in errors[0]
        assert "Traceback" not in result.output
        assert_not_pwned(node)
        assert node_fingerprint(node) == before, f"{key}={value!r} changed the node"


def test_credentials_never_reach_diff_output_and_stay_in_the_file(containerd_node, clean_controller):
    node = containerd_node
    node.write(CONFIG, CREDENTIALS_CONFIG)
    node.sh("systemctl restart containerd")
    assert node.is_active("containerd")
    data = {"stages": "runtimes", "container_runtimes": "containerd"}

    first = node.deploy(data=data, json_output=False, extra_args=["--diff", "-v"])
    assert first.returncode == 0, first.explain()
    for secret in (PASSWORD, AUTH):
        assert secret not in first.output
    assert f"Will modify {CONFIG}" in first.output or "Will modify" in first.output, first.explain()
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in first.output
    assert 'default_runtime_name = "nvidia"' in first.output
    wired = node.read(CONFIG)
    assert wired.startswith(CREDENTIALS_CONFIG)  # the site's lines, credentials included, as they were
    assert f'password = "{PASSWORD}"' in wired
    assert node.is_active("containerd")

    # The wired file reads back as it is: a second run changes nothing and restarts nothing.
    before = {"service": node.service("containerd"), "file": node.stat(CONFIG)}
    second = node.deploy(data=data, extra_args=["--diff", "-v"])
    assert_no_change(second)
    assert PASSWORD not in second.output
    assert {"service": node.service("containerd"), "file": node.stat(CONFIG)} == before


def test_a_path_with_shell_metacharacters_is_used_quoted_never_run(containerd_node, clean_controller):
    """A path may hold ; ' $ and spaces: validation lets it through, every command quotes it."""
    node = containerd_node
    path = "/etc/containerd/it's $(touch /tmp/pwned); `touch /tmp/pwned`.toml"
    result = node.deploy(data={"stages": "runtimes", "containerd_config_path": path})
    assert result.returncode == 0, result.explain()
    assert_not_pwned(node)
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in node.read(path)
    assert_no_change(node.deploy(data={"stages": "runtimes", "containerd_config_path": path}))
    assert_not_pwned(node)


def test_a_typo_of_a_setting_is_named_with_the_setting_it_resembles(node):
    before = node_fingerprint(node)
    result = node.deploy(
        data={"nvidia_driver_brnach": "535", "stages": "kernel"}, json_output=False, extra_args=["--dry"]
    )
    assert result.returncode == 0, result.explain()
    assert "unknown setting 'nvidia_driver_brnach' (--data): did you mean 'nvidia_driver_branch'?" in result.output
    assert "docker_identifier" not in result.output  # pyinfra's own data keys are not ours to flag
    assert node_fingerprint(node) == before
