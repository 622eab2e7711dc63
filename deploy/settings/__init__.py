"""
The settings users set: each one's type, default and description, declared once in its section
(``sections/``, a heading of docs/settings.md each, with the rules of how it combines with the
others), and one typed, validated view of ``host.data``.

Values reach ``host.data`` the pyinfra way, and a deploy call's keyword arguments go over them
(``sources``: ``call_settings``, ``host_settings``; docs/settings.md says in which order). Values from
``--data`` arrive as text or pyinfra's parse of it (``true`` -> True, ``535`` -> 535, JSON); every
setting accepts both, and comma-separated text for lists (``fields``). pydantic checks types,
choices and bounds (``values``); an invalid value raises ``SettingsError`` (``errors``) while pyinfra
prepares the run, so no host is changed, with one line naming the key, the value and what is
allowed. ``model`` joins the sections into ``Settings``; ``hints`` names the setting a typo meant.
docs/settings.md is generated from the declarations: ``.venv/bin/python scripts/settings_doc.py``.

The names below are the settings' face: what the rest of gpu-node imports.
"""

from .errors import SettingsError
from .hints import likely_typos, unknown_names
from .model import ALLOWED, DEFAULTS, SECTIONS, SETTING_FIELDS, Settings, parse_settings
from .sources import call_settings, host_settings, setting_source
from .values import STAGES, Stage, key_url_allowed

__all__ = [
    "ALLOWED",
    "DEFAULTS",
    "SECTIONS",
    "SETTING_FIELDS",
    "STAGES",
    "Settings",
    "SettingsError",
    "Stage",
    "call_settings",
    "host_settings",
    "key_url_allowed",
    "likely_typos",
    "parse_settings",
    "setting_source",
    "unknown_names",
]
