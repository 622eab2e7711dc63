"""The one Jinja environment (deploy/foundations/templates.py): strict, and its to_json filter is json.dumps."""

from __future__ import annotations

import json

import jinja2
import pytest

from deploy.foundations import templates
from deploy.runtimes.docker.daemon_json import render_daemon_json


def test_a_name_the_template_needs_and_is_not_given_is_an_error_not_an_empty_string():
    with pytest.raises(jinja2.UndefinedError, match="is undefined"):
        templates.render("k8s/smoke-pod.yaml.j2")


def test_daemon_json_keeps_utf8_and_two_space_indent_as_docker_writes_it():
    text = render_daemon_json({"data-root": "/srv/dockér", "runtimes": {}})
    assert text == '{\n  "data-root": "/srv/dockér",\n  "runtimes": {}\n}\n'
    assert json.loads(text) == {"data-root": "/srv/dockér", "runtimes": {}}


def test_to_json_without_options_is_json_dumps_so_manifest_digests_do_not_move():
    value = {"name": "é", "markup": "<&>'"}
    assert templates.to_json(value) == json.dumps(value) == '{"name": "\\u00e9", "markup": "<&>\'"}'
