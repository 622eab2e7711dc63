"""The rack section's settings (deploy/settings/sections/rack.py): each bad value one line, before any host changes."""

from __future__ import annotations

import pytest

from deploy.settings import SettingsError, parse_settings

DRA_COMPUTE_DOMAINS = {"gpu_allocator": "dra", "dra_compute_domains": True, "dra_driver_install_method": "helm"}


def test_an_imex_domain_on_a_dra_group_whose_driver_owns_imex_is_refused_and_host_managed_is_not():
    with pytest.raises(
        SettingsError, match="invalid setting imex_domain='rack-a': allowed only with dra_imex=host-managed"
    ):
        parse_settings({"imex_domain": "rack-a", **DRA_COMPUTE_DOMAINS})
    kept = parse_settings({"imex_domain": "rack-a", **DRA_COMPUTE_DOMAINS, "dra_imex": "host-managed"})
    assert kept.imex_domain == "rack-a"
    assert parse_settings({"imex_domain": "rack-a", "gpu_allocator": "dra"}).imex_domain == "rack-a"


@pytest.mark.parametrize(
    "data, line",
    [
        (
            {"imex_address": "gpu1.example"},
            "invalid setting imex_address='gpu1.example': allowed: an IPv4 or IPv6 address",
        ),
        ({"imex_domain": "rack a"}, "invalid setting imex_domain='rack a': allowed: a name"),
        ({"imex_channels": "udev"}, "invalid setting imex_channels='udev': allowed: one of module-option, device-node"),
        ({"gpudirect_rdma": "yes please"}, "invalid setting gpudirect_rdma='yes please': allowed: auto, true or false"),
        ({"mig_layout": '{"name": "x", "gpus": {"all": {"1g.10gb": 0}}}'}, "the count of 1g.10gb: 1 to 8"),
    ],
)
def test_a_bad_rack_value_is_one_line_naming_it(data, line):
    with pytest.raises(SettingsError) as refused:
        parse_settings(data)
    assert line in str(refused.value) and "\n" not in str(refused.value)


def test_command_line_values_read_as_their_types():
    settings = parse_settings(
        {
            "imex_address": " 10.0.0.7 ",
            "gpudirect_rdma": True,
            "imex_channels": "Device-Node",
            "mig_layout": '{"name": "inference", "gpus": {"all": {"1g.10gb": 7}}}',
        }
    )
    assert settings.imex_address == "10.0.0.7"
    assert settings.gpudirect_rdma == "true" and settings.imex_channels == "device-node"
    assert settings.mig_layout.name == "inference"
