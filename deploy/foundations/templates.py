"""
The project's one Jinja environment, over ``templates/``: every file gpu-node renders from a
template (Docker's daemon.json, containerd's fallback config.toml, the Kubernetes manifests
under ``templates/k8s/``) goes through ``render``. Strict: an undefined name is an error, not
an empty string.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2

# templates/ beside the package in a checkout; in the wheel, the package's own copy (pyproject.toml)
_HERE = Path(__file__).resolve().parent.parent
TEMPLATES = next(folder for folder in (_HERE / "template_files", _HERE.parent / "templates") if folder.is_dir())


def to_json(value: Any, **options: Any) -> str:
    """``{{ value | to_json }}``; options go to ``json.dumps`` (``to_json(indent=2)``). Not Jinja's
    own ``tojson``, which escapes ``<``, ``>``, ``&`` and ``'`` for HTML."""
    return json.dumps(value, **options)


_environment = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_environment.filters["to_json"] = to_json


def render(template: str, **context: Any) -> str:
    """Render ``templates/<template>`` (e.g. ``daemon.json.j2`` or ``k8s/device-plugin.yaml.j2``)."""
    return _environment.get_template(template).render(**context)
