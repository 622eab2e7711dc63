"""The health section (docs/health.md): the node's health check, how often it runs, and when the
fleet view calls a node that stopped reporting silent."""

from __future__ import annotations

from pydantic import Field, model_validator

from ..errors import SettingsError, shown
from ..values import TimeSpan, time_span_seconds
from .base import Section

# A check every few seconds would cost the node what it watches for (docs/benchmark.md).
MIN_INTERVAL_SECONDS = 10


class HealthSettings(Section):
    """Health (docs/health.md)"""

    health_check: bool = Field(
        True,
        description="with every run that makes a GPU node (as first_boot_unit), install and enable the node's health "
        "check (gpu-node-health.timer, also run by the first-boot unit): Xid events, GPUs the driver lost, "
        "ECC and row remaps, driver/library mismatches, the next boot's module, the driver's services; it "
        "writes /var/lib/gpu-node/health.json",
    )
    health_check_interval: TimeSpan = Field(
        "1min", description="how often the health check runs (a systemd time span, 10s or longer)"
    )
    health_silent_after: TimeSpan = Field(
        "10min",
        description="the fleet view shows a node whose last health report is older than this as silent (longer "
        "than health_check_interval)",
    )

    @model_validator(mode="after")
    def _spans_fit(self) -> HealthSettings:
        interval = time_span_seconds(self.health_check_interval)
        if interval < MIN_INTERVAL_SECONDS:
            raise SettingsError(
                f"invalid setting health_check_interval={shown(self.health_check_interval)}: allowed: "
                f"{MIN_INTERVAL_SECONDS}s or longer"
            )
        if time_span_seconds(self.health_silent_after) <= interval:
            raise SettingsError(
                f"invalid setting health_silent_after={shown(self.health_silent_after)}: allowed: "
                f"longer than health_check_interval ({self.health_check_interval}), or every node "
                "would be silent between two checks"
            )
        return self
