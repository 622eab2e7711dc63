"""The cdi setting per runtime (deploy/runtimes/cdi.py) and the settings it replaced."""

from __future__ import annotations

import pytest

from deploy.runtimes.cdi import CdiUnsupported, for_containerd, for_docker
from deploy.runtimes.wiring import RuntimeWiring, runtime_wiring
from deploy.settings import SettingsError, likely_typos, parse_settings

AUTO, ON, OFF = RuntimeWiring(enable_cdi=None), RuntimeWiring(enable_cdi=True), RuntimeWiring(enable_cdi=False)


@pytest.mark.parametrize(
    ("release", "written", "expected", "on"),
    [
        ((1, 6), None, None, False),
        ((1, 7), True, True, True),
        ((2, 0), None, True, True),
        ((2, 1), None, True, True),
        ((None, None), None, None, False),
    ],
)
def test_auto_turns_cdi_on_in_each_containerd_that_has_it(release, written, expected, on):
    """1.7 gets enable_cdi written; 2.x has it on by default: nothing written, its dump checked."""
    decided = for_containerd(AUTO, *release, None)
    assert (decided.wiring.enable_cdi, decided.checked.enable_cdi, decided.on) == (written, expected, on)


def test_cdi_true_on_containerd_1_6_is_refused_naming_its_version():
    with pytest.raises(CdiUnsupported, match=r"^cdi=true, but containerd 1\.6\.20~ds1 has no CDI"):
        for_containerd(ON, 1, 6, "1.6.20~ds1")


def test_cdi_false_turns_1_7_off_and_leaves_2_x_as_containerd_has_it():
    assert for_containerd(OFF, 1, 7, "1.7.24").wiring.enable_cdi is False
    decided = for_containerd(OFF, 2, 1, "2.1.9")
    assert decided.wiring.enable_cdi is None and decided.checked.enable_cdi is None and decided.on


def test_cdi_true_on_containerd_2_writes_nothing_and_checks_its_dump():
    decided = for_containerd(ON, 2, 1, "2.1.9")
    assert (decided.wiring.enable_cdi, decided.checked.enable_cdi) == (None, True)


@pytest.mark.parametrize(("major", "enable_cdi"), [(20, None), (24, None), (25, True), (26, True), (None, None)])
def test_auto_turns_cdi_on_in_docker_25_and_newer(major, enable_cdi):
    assert for_docker(AUTO, major, None).wiring.enable_cdi is enable_cdi


def test_cdi_true_on_docker_20_is_refused_naming_its_version():
    with pytest.raises(CdiUnsupported, match=r"^cdi=true, but Docker 20\.10\.24\+dfsg1 has no CDI"):
        for_docker(ON, 20, "20.10.24+dfsg1")


@pytest.mark.parametrize(
    ("given", "cdi"),
    [
        ({}, "auto"),
        ({"cdi": True}, "true"),
        ({"cdi": "FALSE"}, "false"),
        ({"containerd_enable_cdi": True}, "true"),
        ({"docker_enable_cdi": "no"}, "false"),
        ({"containerd_enable_cdi": 1, "docker_enable_cdi": "yes"}, "true"),
    ],
)
def test_cdi_is_read_from_it_or_from_the_settings_it_replaced(given, cdi):
    settings = parse_settings(given)
    assert settings.cdi == cdi
    assert runtime_wiring(settings).enable_cdi is {"auto": None, "true": True, "false": False}[cdi]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"cdi": "maybe"}, "invalid setting cdi='maybe': allowed: auto, true or false"),
        (
            {"containerd_enable_cdi": True, "docker_enable_cdi": False},
            "invalid setting docker_enable_cdi=False: it is now cdi, and containerd_enable_cdi='true' says otherwise: "
            "set cdi alone",
        ),
        (
            {"cdi": "false", "docker_enable_cdi": "yes"},
            "invalid setting docker_enable_cdi='yes': it is now cdi, and cdi='false' says otherwise: set cdi alone",
        ),
        (
            {"containerd_enable_cdi": "x"},
            "invalid setting containerd_enable_cdi='x': allowed: true or false (it is now cdi: auto, true or false)",
        ),
    ],
)
def test_bad_or_disagreeing_cdi_values_stop_the_run_in_one_line(given, message):
    with pytest.raises(SettingsError) as raised:
        parse_settings(given)
    assert str(raised.value) == message


def test_a_replaced_setting_is_named_with_what_it_is_now():
    assert likely_typos({"containerd_enable_cdi": True}) == [
        "setting 'containerd_enable_cdi' is now 'cdi': read as cdi='true'"
    ]
