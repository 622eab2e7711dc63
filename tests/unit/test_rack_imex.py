"""
IMEX domains, pure (deploy/rack/imex.py): a domain's members from the inventory's hosts, the
nodes_config.cfg every member writes, and `nvidia-imex-ctl -N`'s report read back.
tests/fixtures/imex/ctl-N-up.txt is our own three-node report in the shape the published examples show
(a line per node "Node #N - ADDRESS - STATE - Version: V", the connectivity table, "Domain State:";
AWS's IMEX guide for GB200 UltraServers, "Validate the IMEX setup").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.rack.imex import (
    DomainRefusal,
    Member,
    domain_members,
    domain_status,
    member_address,
    missing_peers,
    nodes_config_text,
)

UP = (Path(__file__).resolve().parents[1] / "fixtures" / "imex" / "ctl-N-up.txt").read_text().splitlines()


def test_a_domains_members_are_the_hosts_with_its_name_in_one_order_for_every_member():
    hosts = [
        ("gpu3", "rack-a", None, "10.0.0.30"),
        ("gpu1", "rack-a", "10.0.0.9", "gpu1.example"),
        ("gpu2", "rack-b", None, "10.0.1.2"),
        ("cp", None, None, "10.0.9.9"),
        ("gpu4", "rack-a", None, "10.0.0.4"),
    ]
    members = domain_members("rack-a", hosts)
    assert members == (Member("gpu4", "10.0.0.4"), Member("gpu1", "10.0.0.9"), Member("gpu3", "10.0.0.30"))
    # the order is the addresses' (numeric), not the inventory's: every member writes the same file
    assert domain_members("rack-a", list(reversed(hosts))) == members
    assert nodes_config_text(members) == "10.0.0.4\n10.0.0.9\n10.0.0.30\n"


def test_a_member_without_imex_address_whose_ssh_host_is_a_name_is_refused_naming_the_setting():
    with pytest.raises(
        DomainRefusal,
        match="host gpu1 is in an IMEX domain without imex_address, and its SSH host "
        "'gpu1.example' is not an IP address: set imex_address",
    ):
        member_address("gpu1", None, "gpu1.example")
    assert member_address("gpu1", None, "fd00::1") == "fd00::1"


def test_two_members_at_one_address_are_refused_naming_both():
    with pytest.raises(DomainRefusal, match="hosts gpu1 and gpu2 of IMEX domain 'rack-a' have one address, 10.0.0.1"):
        domain_members("rack-a", [("gpu1", "rack-a", None, "10.0.0.1"), ("gpu2", "rack-a", "10.0.0.1", "gpu2")])


def test_the_published_ctl_output_reads_as_three_ready_nodes_of_an_up_domain():
    status = domain_status(UP)
    assert status.state == "UP"
    assert [(node.index, node.address, node.state, node.version) for node in status.nodes] == [
        (0, "10.20.0.11", "READY", "570.172"),
        (1, "10.20.0.12", "READY", "570.172"),
        (2, "10.20.0.13", "READY", "570.172"),
    ]


def test_a_member_not_ready_or_not_listed_is_named_with_its_host():
    lines = [line.replace("10.20.0.12      - READY", "10.20.0.12      - UNAVAILABLE") for line in UP]
    lines = [line.replace("Domain State: UP", "Domain State: DEGRADED") for line in lines]
    members = [
        Member("gpu1", "10.20.0.11"),
        Member("gpu2", "10.20.0.12"),
        Member("gpu3", "10.20.0.13"),
        Member("gpu4", "10.20.0.7"),
    ]
    status = domain_status(lines)
    assert status.state == "DEGRADED"
    assert missing_peers(status, members) == ["gpu2 (10.20.0.12) UNAVAILABLE", "gpu4 (10.20.0.7) not listed"]
    assert missing_peers(domain_status(UP), members[:3]) == []
