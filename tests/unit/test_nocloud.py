"""
tests/nocloud.py's user data (the cloud-init e2e test's and bench/pull_fleet.py's): the example with a
site's values put in, and refused where the result would differ from the example in anything else.
"""

from __future__ import annotations

import nocloud
import pytest
import yaml

URL = "http://127.0.0.1:8000/"
REQUIREMENTS = "gpu_node==0.3.0 --hash=sha256:" + "a" * 64 + "\n"
SETTINGS = "kernel_modules_load = false\nreboot_allowed = false\n"


def test_the_sites_values_are_the_only_difference_from_the_example():
    example = yaml.safe_load(nocloud.EXAMPLE.read_text())
    user_data = yaml.safe_load(nocloud.site_user_data(wheels_url=URL, requirements=REQUIREMENTS, settings=SETTINGS))
    files = {entry["path"]: entry.pop("content") for entry in user_data["write_files"]}
    assert files[nocloud.SETTINGS_PATH] == SETTINGS + nocloud.EXAMPLE_SETTINGS + 'nvidia_driver_branch = "535"\n'
    assert files[nocloud.REQUIREMENTS_PATH].endswith("\n" + REQUIREMENTS)
    assert URL in user_data["runcmd"][1] and nocloud.EXAMPLE_WHEELS_URL in example["runcmd"][1]
    user_data["runcmd"][1] = example["runcmd"][1]
    for entry in example["write_files"]:
        del entry["content"]
    assert user_data == example


def test_a_wheels_address_that_would_change_the_runcmd_is_refused():
    with pytest.raises((AssertionError, yaml.YAMLError)):
        nocloud.site_user_data(
            wheels_url='http://127.0.0.1:8000/", "--index-url", "http://other/',
            requirements=REQUIREMENTS,
            settings=SETTINGS,
        )


def test_without_the_apt_lines_is_refused_when_the_example_writes_them_otherwise(tmp_path, monkeypatch):
    example = tmp_path / "cloud-init-pull.yaml"
    text = nocloud.EXAMPLE.read_text()
    assert text.count("packages:\n  - python3-venv\n") == 1
    example.write_text(text.replace("packages:\n  - python3-venv\n", "packages: [python3-venv]\n"))
    monkeypatch.setattr(nocloud, "EXAMPLE", example)
    with pytest.raises(AssertionError, match="differs from the example"):
        nocloud.site_user_data(wheels_url=URL, requirements=REQUIREMENTS, settings=SETTINGS, packages=False)
