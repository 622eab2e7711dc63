"""Pull mode's settings file (deploy/pull_settings.py) and its units (deploy/pull_install.py)."""

from __future__ import annotations

import pytest

from deploy.pull_install import exec_word, unit_texts
from deploy.pull_settings import PULL_DEFAULTS, settings_from_file, settings_from_text
from deploy.settings import SettingsError, parse_settings

GOOD = """\
# this node's settings
stages = ["kernel", "runtimes"]
container_runtimes = ["containerd"]
kernel_modules_load = false
"""


def test_a_good_file_gives_the_settings_with_pull_modes_report_paths():
    values = settings_from_text(GOOD)
    assert values["container_runtimes"] == ["containerd"] and values["kernel_modules_load"] is False
    assert values["verify_report_path"] == PULL_DEFAULTS["verify_report_path"]
    assert parse_settings(values).stages == ("kernel", "runtimes")


@pytest.mark.parametrize("text, line", [
    (GOOD + 'container_runtimes_x = ["podman"]\n', "unknown setting 'container_runtimes_x' given to /e/s.toml: did you mean"),
    (GOOD.replace('["containerd"]', '["podman"]'), "invalid setting container_runtimes=['podman']: allowed:"),
    (GOOD + "kernel_modules_load = \n", "/e/s.toml: not valid TOML: "),
])
def test_a_broken_file_is_one_line_naming_the_file_and_its_line(text, line):
    with pytest.raises(SettingsError) as raised:
        settings_from_text(text, "/e/s.toml")
    message = str(raised.value)
    assert "\n" not in message and message.startswith(line), message
    assert "line 3" in message or "line 5" in message, message


def test_a_missing_file_sets_only_the_report_paths(tmp_path):
    assert settings_from_file(str(tmp_path / "absent.toml")) == PULL_DEFAULTS


def test_the_service_runs_pyinfra_local_with_the_entry_and_quotes_odd_paths():
    service = unit_texts("/opt/gpu-node/bin/python", "/opt/gpu node/gpu_node/pull.py")[
        "gpu-node-pull.service"]
    assert 'ExecStart=/opt/gpu-node/bin/python -m pyinfra -y @local "/opt/gpu node/gpu_node/pull.py"' in service
    assert exec_word('a"b\\c%d$e') == '"a\\"b\\\\c%%d$$e"'


def test_the_cloud_init_examples_settings_pass_the_model_and_it_installs_the_timer():
    from pathlib import Path

    import yaml

    example = yaml.safe_load((Path(__file__).resolve().parents[2] / "docs" / "examples" / "cloud-init-pull.yaml")
                             .read_text())
    (settings,) = [entry for entry in example["write_files"] if entry["path"] == "/etc/gpu-node/settings.toml"]
    assert parse_settings(settings_from_text(settings["content"])).container_runtimes == ("containerd",)
    assert ["/opt/gpu-node/bin/python", "-m", "gpu_node.pull_install"] in example["runcmd"]
