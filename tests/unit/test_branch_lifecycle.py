"""NVIDIA's driver branches and their end of life (deploy/driver/branches.py), named by preflight and
verify; the date is the test's, never the wall clock."""

from __future__ import annotations

from datetime import date

import pytest
from plan import DEFAULT, PCI_WITH_GPU, gpu_node, node_lines, run_deploy
from test_driver_plans import DEBIAN_FILES

from deploy.driver.branches import BY_NUMBER, LTSB, NEW_FEATURE, PRODUCTION, branch_summary, end_of_life_warning
from deploy.facts.nvidia import NodeSurvey
from deploy.settings import parse_settings
from deploy.verification.driver_branch import lifecycle_step
from deploy.verification.options import VerifyOptions

BOOKWORM_TODAY = date(2026, 11, 28)


def test_the_table_holds_the_issues_branches_with_their_kind_and_end_of_life():
    assert {number: (BY_NUMBER[number].kind, BY_NUMBER[number].until) for number in (535, 580, 595, 620)} == {
        535: (LTSB, "June 2026"),
        580: (LTSB, "June 2028"),
        595: (PRODUCTION, "March 2027"),
        620: (LTSB, "September 2029"),
    }
    assert BY_NUMBER[610].kind == NEW_FEATURE


def test_debian_bookworms_535_is_past_its_end_of_life_and_the_line_says_what_to_move_to():
    line = end_of_life_warning(535, BOOKWORM_TODAY, "the node's installed driver (535.261.03)")
    assert line == (
        "the node's installed driver (535.261.03) is driver branch 535, a long term support branch whose "
        "end of life was June 2026: NVIDIA no longer fixes it, security fixes included; move to a long "
        "term support branch: R580 (until June 2028), R620 (until September 2029) (nvidia_driver_branch, "
        "where the family packages it)"
    )


@pytest.mark.parametrize("today, past", [(date(2026, 6, 30), False), (date(2026, 7, 1), True)])
def test_the_end_of_life_is_the_last_day_of_its_month(today, past):
    assert (end_of_life_warning(535, today, "x") is not None) == past


def test_a_supported_or_unknown_branch_gets_no_warning():
    assert end_of_life_warning(580, BOOKWORM_TODAY, "x") is None
    assert end_of_life_warning(570, BOOKWORM_TODAY, "x") is None
    assert "not in NVIDIA's support matrix" in branch_summary(570, BOOKWORM_TODAY)
    assert (
        branch_summary(580, BOOKWORM_TODAY) == "driver branch 580 (long term support branch), supported until June 2028"
    )


def test_verify_names_the_branch_past_its_end_of_life_as_a_pass_with_the_move():
    readout = {
        "node": NodeSurvey().process(node_lines("6.1.0-18-amd64", built="535.261.03")),
        "smi": {"gpus": []},
        "kernel_module": None,
        "kernels": {"kernels": {}},
    }
    options = VerifyOptions.from_settings(parse_settings({}))
    from dataclasses import replace

    step = lifecycle_step(readout, replace(options, today=BOOKWORM_TODAY))
    assert step.status == "pass" and step.reason.startswith(
        "the node's driver 535.261.03 is driver branch 535, a long term support branch whose end of life was June 2026"
    )
    assert lifecycle_step(readout, replace(options, today=date(2026, 1, 5))).reason == (
        "driver branch 535 (long term support branch), supported until June 2026"
    )


def test_preflight_warns_of_a_node_whose_installed_branch_is_past_its_end_of_life(caplog):
    """535 ended in June 2026: past it on any day this test runs from now on."""
    import logging

    caplog.set_level(logging.WARNING, logger="pyinfra")
    run = run_deploy(
        gpu_node(
            "debian-12",
            node_survey=node_lines("6.1.0-18-amd64", pci=PCI_WITH_GPU, built="535.261.03"),
            facts=DEBIAN_FILES,
            unstated=DEFAULT,
        )
    )
    assert run.error is None
    assert any(
        "the node's installed driver (535.261.03) is driver branch 535, a long term support branch whose end "
        "of life was June 2026" in record.getMessage()
        for record in caplog.records
    )
