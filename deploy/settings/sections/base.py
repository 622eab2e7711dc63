"""
What every section shares: the model's configuration (frozen, numbers from ``--data`` read as text
where text is wanted, built on first use) and what its rules of how settings combine read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, ValidationInfo

from ..errors import SettingsError, shown
from ..values import KEY_URL_ALLOWED, key_url_allowed

# The validation context ``parse_settings`` gives: the values as given (an error line shows a
# value as it was given, and some rules tell a value given from one left alone).
GIVEN = "given"


class Section(BaseModel):
    # Numbers from --data (pyinfra turns "535" into 535) are read as text where text is wanted. The
    # validator is built when a model is first validated (Settings, the join): never for a section
    # alone, and not at import.
    model_config = ConfigDict(frozen=True, coerce_numbers_to_str=True, extra="ignore", defer_build=True)


def given_values(info: ValidationInfo) -> Mapping[str, Any] | None:
    """The values ``parse_settings`` was given, when it builds the model: the rules of how settings
    combine are checked then. None for a model built otherwise (its values' types only: the defaults,
    a ``--data`` value a deploy call overrides)."""
    context = info.context
    return context.get(GIVEN) if isinstance(context, Mapping) else None


def check_repository_urls(settings: Any, key_urls: tuple[str, ...], repository_urls: tuple[str, ...]) -> None:
    """The signing keys' URLs (https, or with allow_insecure_repositories a file on the node; never
    plain http), then the repositories' (https unless allow_insecure_repositories), in that order."""
    insecure = settings.allow_insecure_repositories
    for key in key_urls:
        value = getattr(settings, key)
        if value is not None and not key_url_allowed(value, allow_file=insecure):
            raise SettingsError(f"invalid setting {key}={shown(value)}: allowed: {KEY_URL_ALLOWED}")
    if insecure:
        return
    for key in repository_urls:
        value = getattr(settings, key)
        if urlparse(value).scheme != "https":
            raise SettingsError(
                f"invalid setting {key}={shown(value)}: allowed: an https:// URL "
                "(set allow_insecure_repositories=true for an http:// or file:// mirror)"
            )
