"""
Setting names someone likely meant: a key of the host's data that is not a setting but looks like
one (a warning), and the nearest setting to a name a deploy call or ``--data`` gave (named in the
one line that stops the run). pyinfra's own keys are left alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping
from functools import lru_cache
from typing import Any

from .errors import SettingsError, shown
from .model import FOLDED_SETTINGS, SETTING_FIELDS, fold_old_settings

# Leading words of setting names too common to claim: a user key such as time_zone or
# service_name is likely someone else's, so only a close match (TYPO_CUTOFF) is pointed out.
GENERIC_LEADING_WORDS = frozenset({"allow", "download", "min", "require", "service", "time"})
TYPO_CUTOFF = 0.85
LOOSE_CUTOFF = 0.6


def setting_prefixes() -> frozenset[str]:
    """``nvidia_``, ``containerd_``, ``gpushare_`` ...: the leading words of our setting names."""
    return frozenset(
        name.split("_", 1)[0] + "_"
        for name in SETTING_FIELDS
        if "_" in name and name.split("_", 1)[0] not in GENERIC_LEADING_WORDS
    )


@lru_cache(maxsize=1)
def pyinfra_data_keys() -> frozenset[str]:
    """Data keys pyinfra's connectors read (ssh_user, docker_identifier ...): never ours to warn about."""
    from pyinfra.api.connectors import get_all_connectors

    return frozenset(key for connector in get_all_connectors().values() for key in connector.data_meta)


def closest_setting(key: str, loose: bool = False) -> str | None:
    """
    The setting ``key`` most likely meant: among those with its prefix when it has one of ours.
    ``loose`` (a key given on the command line, surely meant as a setting): also a setting that
    holds it as whole words (driver_branch: nvidia_driver_branch; reboot: reboot_allowed), or a
    more distant match.
    """
    prefix = next((p for p in sorted(setting_prefixes(), key=len, reverse=True) if key.startswith(p)), None)
    if prefix is not None:
        candidates = [name for name in SETTING_FIELDS if name.startswith(prefix)]
        return max(candidates, key=lambda name: difflib.SequenceMatcher(None, key, name).ratio())
    close = difflib.get_close_matches(key, SETTING_FIELDS, n=1, cutoff=TYPO_CUTOFF)
    if close or not loose:
        return close[0] if close else None
    words = [name for name in SETTING_FIELDS if f"_{key}_" in f"_{name}_"]
    if words:
        return min(words, key=len)
    close = difflib.get_close_matches(key, SETTING_FIELDS, n=1, cutoff=LOOSE_CUTOFF)
    return close[0] if close else None


def likely_typos(
    data: Mapping[str, Any], command_line: Collection[str] = (), source: Callable[[str], str] | None = None
) -> list[str]:
    """
    Keys in data that are not settings but look like one (a warning, not an error): any key
    with one of our prefixes (nvidia_driver_brnach), and any key close to a setting name; and every
    key of ``command_line`` (--data) that is not a setting, with the nearest one or none. pyinfra's
    own keys (ssh_*, docker_identifier, _sudo ...) are left alone. ``source``: where a key was set
    (``setting_source``), named in the note.
    """
    notes = []
    for key in data:
        key = str(key)
        where = f" ({source(key)})" if source else ""
        if key in FOLDED_SETTINGS:
            notes.append(
                f"setting {key!r}{where} is now {FOLDED_SETTINGS[key]!r}: read as {FOLDED_SETTINGS[key]}="
                f"{shown(fold_old_settings({key: data[key]})[FOLDED_SETTINGS[key]])}"
            )
            continue
        if key in SETTING_FIELDS or key.startswith("_") or key in pyinfra_data_keys():
            continue
        close = closest_setting(key, loose=key in command_line)
        if close:
            notes.append(f"unknown setting {key!r}{where}: did you mean {close!r}?")
        elif key in command_line:
            notes.append(f"unknown setting {key!r}{where}: no setting is named like it (docs/settings.md lists them)")
    return notes


def unknown_names(given: Mapping[str, Any], where: str) -> None:
    """SettingsError in one line for the first name in ``given`` that is not a setting."""
    for key in given:
        if key not in SETTING_FIELDS and key not in FOLDED_SETTINGS:
            close = closest_setting(key, loose=True)
            hint = (
                f": did you mean {close!r}?" if close else ": no setting is named like it (docs/settings.md lists them)"
            )
            raise SettingsError(f"unknown setting {key!r} given to {where}{hint}")
