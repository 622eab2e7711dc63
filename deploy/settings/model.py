"""
Every setting, typed: ``Settings`` joins the sections (deploy/settings/sections/, one heading of
docs/settings.md each), and ``parse_settings`` builds it from the values given, checking each value
and then how they combine (the sections' own rules), with one line for the first that does not fit.
The settings of an older release are read as the ones that took them over.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from pydantic import SecretStr, ValidationError, model_validator
from pydantic.fields import FieldInfo

from .errors import SettingsError, shown
from .fields import allowed_values, from_command_line, unwrap
from .sections.base import GIVEN, Section
from .sections.data_center import DataCenterSettings
from .sections.dra import DraSettings
from .sections.gitops import GitOpsSettings
from .sections.gpushare import GpushareSettings
from .sections.health import HealthSettings
from .sections.health_cluster import HealthClusterSettings
from .sections.host_safety import HostSafetySettings
from .sections.inventory import InventorySettings
from .sections.kubernetes import KubernetesSettings
from .sections.packages import PackageSettings
from .sections.rack import RackSettings
from .sections.runtimes import RuntimeSettings
from .sections.signing import ModuleSigningSettings
from .sections.verification import VerifySettings

# Settings an older release had, and the one that took each over (a value given to one is read as it).
FOLDED_SETTINGS = {"containerd_enable_cdi": "cdi", "docker_enable_cdi": "cdi"}


class Settings(
    RuntimeSettings,
    PackageSettings,
    DataCenterSettings,
    ModuleSigningSettings,
    RackSettings,
    HealthSettings,
    HostSafetySettings,
    VerifySettings,
    KubernetesSettings,
    GpushareSettings,
    GitOpsSettings,
    DraSettings,
    HealthClusterSettings,
    InventorySettings,
):
    """Every setting, typed; build it with ``parse_settings`` (which also checks how settings combine)."""

    @model_validator(mode="before")
    @classmethod
    def _read_command_line_values(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        fields = cls.model_fields
        return {key: from_command_line(fields[key], value) for key, value in data.items() if key in fields}

    def runs(self, stage: str) -> bool:
        return stage in self.stages

    def wires(self, runtime: str) -> bool:
        return runtime in self.container_runtimes

    def kube_node_name(self, host_name: str) -> str:
        return dict(self.kube_node_names).get(host_name, host_name)


SECTIONS: tuple[type[Section], ...] = Settings.__bases__
# In the order the sections declare them (pydantic's own order starts with the last base).
SETTING_FIELDS: dict[str, FieldInfo] = {
    name: Settings.model_fields[name] for section in SECTIONS for name in section.model_fields
}
DEFAULTS: dict[str, Any] = {name: item.default for name, item in SETTING_FIELDS.items()}
ALLOWED: dict[str, str] = {name: allowed_values(item) for name, item in SETTING_FIELDS.items()}


def fold_old_settings(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with the settings of FOLDED_SETTINGS read as the one that took each over; values that
    disagree stop the run, naming both."""
    if not FOLDED_SETTINGS.keys() & data.keys():
        return data
    folded = {key: value for key, value in data.items() if key not in FOLDED_SETTINGS}
    given: dict[str, tuple[str, str]] = {}
    for old, new in FOLDED_SETTINGS.items():
        if old not in data:
            continue
        value = str(data[old]).strip().lower()
        value = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}.get(
            value, value
        )
        if value not in get_args(unwrap(SETTING_FIELDS[new].annotation)[0]):
            raise SettingsError(
                f"invalid setting {old}={shown(data[old])}: allowed: true or false (it is now {new}: {ALLOWED[new]})"
            )
        if new in data or new in given:
            earlier, was = (new, data[new]) if new in data else given[new]
            if str(was).lower() != str(value):
                raise SettingsError(
                    f"invalid setting {old}={shown(data[old])}: it is now {new}, and "
                    f"{earlier}={shown(was)} says otherwise: set {new} alone"
                )
        given.setdefault(new, (old, value))
        folded.setdefault(new, value)
    return folded


def typed(data: Mapping[str, Any], combined: bool = False) -> Settings:
    """``data`` (old settings folded) checked value by value, and with ``combined`` how they combine
    (the sections' rules): SettingsError in one line for the first that does not fit."""
    data = fold_old_settings(data)
    try:
        return Settings.model_validate(data, context={GIVEN: data} if combined else None)
    except ValidationError as invalid:
        # pydantic lists every error over several lines: the first in the documented order, in one line.
        order = list(SETTING_FIELDS)
        error = min(invalid.errors(), key=lambda error: order.index(str(error["loc"][0])))
        key = str(error["loc"][0])
        allowed = str(error["ctx"]["error"]) if error["type"] == "value_error" else ALLOWED[key]
        value = "(not shown: a secret)" if unwrap(SETTING_FIELDS[key].annotation)[0] is SecretStr else shown(data[key])
        raise SettingsError(f"invalid setting {key}={value}: allowed: {allowed}") from None


def parse_settings(data: Mapping[str, Any]) -> Settings:
    """Build the typed view of ``data`` (defaults filled in); raise SettingsError on any bad value, or
    any that does not fit with another."""
    return typed(data, combined=True)
