"""
The public deploys' signatures and docstrings (deploy/signatures.py), generated from the settings'
declarations: help() and inspect.signature show every setting as a keyword with its default; the
deploy takes every one of them at that default as if none were given, and still stops at a keyword
that is no setting.
"""

from __future__ import annotations

import inspect
import re

import pytest
from test_api import KERNEL_ONLY, call

import deploy
from deploy.settings import DEFAULTS, SETTING_FIELDS, SettingsError


@pytest.mark.parametrize("name", deploy.__all__)
def test_each_public_deploy_shows_every_setting_as_a_keyword_with_its_default(name):
    function = getattr(deploy, name)
    parameters = list(inspect.signature(function).parameters.values())
    keywords = [parameter for parameter in parameters if parameter.kind is parameter.KEYWORD_ONLY]
    assert [parameter.name for parameter in keywords] == list(SETTING_FIELDS)
    assert {parameter.name: parameter.default for parameter in keywords} == DEFAULTS
    # pyinfra's global arguments (_sudo ...) are taken too; nothing is positional
    assert [parameter.kind for parameter in parameters if parameter not in keywords] == [inspect.Parameter.VAR_KEYWORD]

    doc = inspect.getdoc(function)
    assert doc.startswith(inspect.getdoc(function._inner).split("\n\n")[0])  # its own words first
    lines = doc.splitlines()
    for setting, item in SETTING_FIELDS.items():
        at = lines.index(f"    {setting}={DEFAULTS[setting]!r}")
        assert lines[at + 1] == f"        {item.description}"


def test_help_shows_the_settings_not_a_bare_keyword_mapping():
    import pydoc

    text = pydoc.render_doc(deploy.provision_gpu_node, renderer=pydoc.plaintext)
    assert "(**settings)" not in text
    assert "provision_gpu_node(*, stages=('kernel', 'driver', 'toolkit', 'runtimes', 'verify')," in text
    assert "    nvidia_driver_branch=None\n        " in text


def test_every_setting_of_the_signature_at_its_default_runs_as_if_none_were_given(tmp_path):
    """The signature's defaults are the deploy's: all of them passed (the kernel stage alone) plan the
    same commands as the call that passes none of them. gpu_sharing_replicas aside: given at all, it
    asks for time-slicing or MPS, and without either the run stops (deploy/settings/sections/kubernetes.py's rule)."""
    keywords = {
        name: parameter.default
        for name, parameter in inspect.signature(deploy.provision_gpu_node).parameters.items()
        if parameter.kind is parameter.KEYWORD_ONLY and name != "gpu_sharing_replicas"
    }
    assert keywords.keys() >= KERNEL_ONLY.keys()
    _, plain_error, plain = call(deploy.provision_gpu_node, tmp_path / "plain", **KERNEL_ONLY)
    _, error, every = call(
        deploy.provision_gpu_node,
        tmp_path / "every",
        **{**keywords, "fleet_report_path": str(tmp_path / "every" / "fleet.json"), **KERNEL_ONLY},
    )
    assert plain_error is None and error is None, (plain_error, error)

    def same_upload_folder(commands):  # each run uploads through a folder of its own random name
        return [re.sub(r"/tmp/pyinfra-gpu-node-[0-9a-f]+", "/tmp/pyinfra-gpu-node-X", command) for command in commands]

    assert every and same_upload_folder(every) == same_upload_folder(plain)


@pytest.mark.parametrize("name", deploy.__all__)
def test_a_keyword_that_is_no_setting_still_stops_the_run_before_any_command(tmp_path, name):
    _, error, commands = call(getattr(deploy, name), tmp_path, nvidia_driver_brnach="550")
    assert isinstance(error, SettingsError)
    assert str(error) == f"unknown setting 'nvidia_driver_brnach' given to {name}: did you mean 'nvidia_driver_branch'?"
    assert commands == []
