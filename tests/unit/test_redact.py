"""Credentials in existing runtime configs never reach the --diff output or our error messages."""

from __future__ import annotations

import base64
import json
import logging
import re
import subprocess

import pytest
from corpus import containerd_configs, docker_configs, file_params, read_text
from plan import run_plan, settings_for
from pyinfra.api import config as pyinfra_config

from deploy.distros.families import detect_platform
from deploy.facts.containerd import config_read
from deploy.foundations import redact, toml_layout
from deploy.foundations.toml_layout import ConfigError
from deploy.operations.docker import state_read
from deploy.operations.failure import fail_host
from deploy.runtimes.containerd.cri import merge_containerd_config, parse_config
from deploy.runtimes.docker.daemon_json import DaemonConfigError, parse_daemon_json
from deploy.runtimes.wiring import RuntimeWiring
from deploy.tasks.containerd import containerd_runtime
from deploy.tasks.docker import docker_runtime

PASSWORD = "s3cr3t-PASSWORD-value"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.identity-TOKEN"
BASIC = "Ym9iOnMzY3IzdA=="

# containerd 1.6 (config version 2): registry credentials in the CRI plugin's config.
CONTAINERD_16 = f"""version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"

  [plugins."io.containerd.grpc.v1.cri".registry]
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
      endpoint = ["https://mirror.example.internal"]

    # the site's private registry
    [plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".auth]
      username = "bob"
      password = "{PASSWORD}"  # rotated monthly
      auth = "{BASIC}"
      identitytoken = "{TOKEN}"

    [plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".tls]
      insecure_skip_verify = false

    [plugins."io.containerd.grpc.v1.cri".registry.auths."https://gcr.io"]
      username = "_json_key"
      password = "{PASSWORD}"
"""

# containerd 2.x (config version 3): registry hosts in config_path, the old auth table still read.
CONTAINERD_2 = f"""version = 3

[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "/etc/containerd/certs.d"
    [plugins."io.containerd.cri.v1.images".registry.configs."r.example".auth]
      username = "bob"
      password = "{PASSWORD}"
"""

# /etc/containerd/certs.d/r.example/hosts.toml: credentials travel in a header.
HOSTS_TOML = f"""server = "https://r.example"

[host."https://r.example"]
  capabilities = ["pull", "resolve"]
  [host."https://r.example".header]
    Authorization = ["Basic {BASIC}"]
    X-Request-Id = ["gpu-node"]
"""

DAEMON_JSON = f"""{{
    "log-driver": "splunk",
    "log-opts": {{"splunk-token": "{TOKEN}", "splunk-url": "https://splunk.example:8088"}},
    "registry-mirrors": ["https://mirror.example.internal"],
    "proxies": {{"http-proxy": "http://proxy.example:3128"}}
}}
"""

SECRETS = (PASSWORD, TOKEN, BASIC, "bob", "_json_key")
WIRING = RuntimeWiring()


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


@pytest.mark.parametrize(
    "key, secret",
    [
        ("password", True),
        ("identitytoken", True),
        ("auth", True),
        ("Authorization", True),
        ("splunk-token", True),
        ("client_secret", True),
        ("sandbox_image", False),
        ("config_path", False),
        ("endpoint", False),
        ("username", False),
    ],
)
def test_credential_key_names(key, secret):
    # username is masked only under an auth table (see below), not everywhere.
    assert redact.is_secret_key(key) is secret


def test_containerd_16_auth_tables_are_masked_and_everything_else_is_kept_as_it_is():
    masked = redact.mask_toml(CONTAINERD_16)
    assert_no_secret(masked)
    assert masked.count('"***"') == 6  # username, password, auth, identitytoken; auths' username, password
    assert '      password = "***"  # rotated monthly' in masked.splitlines()  # indent and comment kept
    assert len(masked.splitlines()) == len(CONTAINERD_16.splitlines())
    for kept in (
        'sandbox_image = "registry.k8s.io/pause:3.9"',
        'endpoint = ["https://mirror.example.internal"]',
        "# the site's private registry",
        "insecure_skip_verify = false",
    ):
        assert kept in masked


def test_containerd_2_config_path_stays_and_its_auth_table_is_masked():
    masked = redact.mask_toml(CONTAINERD_2)
    assert_no_secret(masked)
    assert 'config_path = "/etc/containerd/certs.d"' in masked


def test_hosts_toml_authorization_header_is_masked_other_headers_kept():
    masked = redact.mask_toml(HOSTS_TOML)
    assert_no_secret(masked)
    assert 'Authorization = "***"' in masked
    assert 'X-Request-Id = ["gpu-node"]' in masked and 'capabilities = ["pull", "resolve"]' in masked


def test_inline_tables_and_arrays_of_tables_are_masked_too():
    text = f'[a]\nauth = {{ username = "bob", password = "{PASSWORD}" }}\n[[b]]\ntoken = "{TOKEN}"\nname = "x"\n'
    masked = redact.mask_toml(text)
    assert_no_secret(masked)
    assert 'name = "x"' in masked


def test_daemon_json_is_masked_token_by_token_keeping_its_layout():
    masked = redact.mask_json(DAEMON_JSON)
    assert TOKEN not in masked
    assert masked == DAEMON_JSON.replace(TOKEN, "***")  # only the value changed, byte for byte
    plain = '{\n  "a": [1, 2],\n  "b": {"c": null}\n}\n'
    assert redact.mask_json(plain) == plain


def test_daemon_json_values_under_a_credential_object_are_all_masked():
    masked = redact.mask_json('{"auths": {"r.example": {"auth": "abc", "email": "x@y"}}, "n": 1}')
    assert masked == '{"auths": {"r.example": {"auth": "***", "email": "***"}}, "n": 1}'


def test_diff_of_the_nvidia_merge_shows_the_runtime_lines_and_no_credential():
    merged = merge_containerd_config(CONTAINERD_16, WIRING)
    assert PASSWORD in merged.text  # the merge keeps the site's credentials in the file
    lines = redact.masked_diff_lines(CONTAINERD_16, merged.text, "toml")
    text = "\n".join(lines)
    assert_no_secret(text)
    assert any("+" in line and 'BinaryName = "/usr/bin/nvidia-container-runtime"' in line for line in lines)
    assert any("+" in line and 'default_runtime_name = "nvidia"' in line for line in lines)


def test_diff_of_a_new_file_from_a_base_with_credentials_is_masked():
    lines = redact.masked_diff_lines(None, CONTAINERD_2, "toml")
    assert_no_secret("\n".join(lines)) and lines


def test_toml_parse_errors_do_not_quote_the_value_they_stopped_at():
    with pytest.raises(ConfigError) as raised:
        parse_config("[a.auth]\npassword = Qs3cret\n", "/etc/containerd/config.toml")
    message = str(raised.value)
    assert "'Q'" not in message and "s3cret" not in message
    assert message == "/etc/containerd/config.toml is not valid TOML: Unexpected character at line 2 col 11"


def test_json_parse_errors_name_no_value():
    with pytest.raises(DaemonConfigError) as raised:
        parse_daemon_json('{"log-opts": {"splunk-token": "' + TOKEN + '" "x"}}', "/etc/docker/daemon.json")
    assert TOKEN not in str(raised.value) and "line 1" in str(raised.value)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def family(distro_id: str):
    return detect_platform({"name": distro_id, "major": None, "release_meta": {"ID": distro_id}}, "x86_64").family


@pytest.fixture
def diff_on(monkeypatch):
    # what pyinfra's --diff sets
    monkeypatch.setitem(pyinfra_config.config_defaults, "DIFF", True)


def test_containerd_operation_with_diff_logs_the_masked_change(diff_on, caplog):
    containerd_found = {
        "paths": [],
        "units": {},
        "generated_versions": {},
        "binary": "/usr/bin/containerd",
        "installation": {"name": "plain", "service": "containerd"},
    }
    caplog.set_level(logging.INFO, logger="pyinfra")
    run_plan(
        containerd_runtime,
        settings_for(),
        family("debian"),
        containerd_found,
        facts=[
            (
                config_read("/etc/containerd/config.toml", None, "containerd"),
                f"binary_path /usr/bin/containerd\nconfig {b64(CONTAINERD_16)}",
            )
        ],
    )
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "Will modify" in logged and "/etc/containerd/config.toml" in logged
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in logged
    assert 'password = "***"' in logged or "registry.configs" not in logged  # context lines are masked
    assert_no_secret(logged)


def test_containerd_operation_without_diff_logs_no_diff(caplog):
    containerd_found = {
        "paths": [],
        "units": {},
        "generated_versions": {},
        "binary": "/usr/bin/containerd",
        "installation": {"name": "plain", "service": "containerd"},
    }
    caplog.set_level(logging.INFO, logger="pyinfra")
    run_plan(
        containerd_runtime,
        settings_for(),
        family("debian"),
        containerd_found,
        facts=[
            (
                config_read("/etc/containerd/config.toml", None, "containerd"),
                f"binary_path /usr/bin/containerd\nconfig {b64(CONTAINERD_16)}",
            )
        ],
    )
    assert "BinaryName" not in "\n".join(record.getMessage() for record in caplog.records)


def test_docker_operation_with_diff_logs_the_masked_change(diff_on, caplog):
    caplog.set_level(logging.INFO, logger="pyinfra")
    state = (
        f"dockerd /usr/sbin/dockerd\nversion Docker version 20.10.24+dfsg1, build 297e128\nconfig {b64(DAEMON_JSON)}"
    )
    run_plan(
        docker_runtime,
        settings_for(container_runtimes="docker"),
        family("debian"),
        facts=[(state_read("/etc/docker/daemon.json"), state)],
    )
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "Will modify" in logged and "/etc/docker/daemon.json" in logged
    assert '"path": "/usr/bin/nvidia-container-runtime"' in logged
    assert '"splunk-token": "***"' in logged
    assert TOKEN not in logged


def test_a_config_with_auth_and_tls_tables_reads_back_byte_for_byte_and_rewires_to_itself():
    """tomlkit alone re-indents the .tls header on every round trip: the wired file never settled."""
    assert parse_config(CONTAINERD_16, "config.toml").as_string() == CONTAINERD_16
    merged = merge_containerd_config(CONTAINERD_16, WIRING).text
    assert merged.startswith(CONTAINERD_16)  # the site's lines untouched, the runtimes appended
    assert merge_containerd_config(merged, WIRING).text == merged
    assert redact.mask_toml(CONTAINERD_16).count("\n") == CONTAINERD_16.count("\n")
    assert '    [plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".tls]\n' in redact.mask_toml(
        CONTAINERD_16
    )


# Real rejections of `containerd --config C config dump` (containerd 1.6.20, bookworm) for
# credential values of the wrong type: go-toml v1 quotes the value.
CONTAINERD_16_REJECTIONS = [
    ("containerd: (3, 1): Can't convert 987654321(int64) to string", "987654321"),
    ("containerd: (3, 1): Can't convert [s3cr3t-A]([]interface {}) to a slice", "s3cr3t-A"),
    ('containerd: (0, 0): Can\'t convert x = "s3cr3t-C"\n(*toml.Tree) to a tree', "s3cr3t-C"),
]


@pytest.mark.parametrize("output, secret", CONTAINERD_16_REJECTIONS)
def test_daemon_rejections_withhold_the_value_they_quote(output, secret):
    shown = redact.daemon_output(output)
    assert secret not in shown
    assert shown.startswith("containerd: (") and "Can't convert (value withheld)" in shown


def test_daemon_output_masks_echoed_credential_assignments_and_keeps_the_rest():
    assert redact.daemon_output(f'password = "{PASSWORD}"') == "password = ***"
    assert redact.daemon_output(f'"splunk-token": "{TOKEN}",') == '"splunk-token": ***'
    plain = 'failed to load plugin io.containerd.grpc.v1.cri: invalid plugin key URI "x"'
    assert redact.daemon_output(plain) == plain


@pytest.mark.parametrize(
    "line",
    [
        'password = "s3cr3t-PASSWORD-value"',
        '"splunk-token": "abc123",',
        "Can't convert 987654321(int64) to string",
        "  identitytoken = 'x'",
        "failed to load plugin io.containerd.grpc.v1.cri: invalid plugin config",
    ],
)
def test_the_remote_scripts_sed_filter_masks_as_daemon_output_does(line):
    shown = subprocess.run(
        ["sh", "-c", redact.shell_daemon_output_filter()], input=line + "\n", capture_output=True, text=True, check=True
    ).stdout.rstrip("\n")
    assert shown == redact.daemon_output(line)


# --- URL user-info and header/token-like keys, wherever they show ------------------------------

USERINFO_PASSWORD = "hunter2-MIRROR-pw"
API_KEY = "k3y-API-VALUE-0123"


@pytest.mark.parametrize(
    "key, secret",
    [
        ("X-Api-Key", True),
        ("x-api-key", True),
        ("api_key", True),
        ("apiKey", True),
        ("X-Registry-Token", True),
        ("Proxy-Authorization", True),
        ("bearer_token", True),
        ("aws_access_key_id", True),
        ("private_key", True),
        ("Cookie", True),
        ("passphrase", True),
        ("key_file", False),
        ("cert_file", False),
        ("X-Meta-Source-Client", False),
        ("http-proxy", False),
        ("registry-mirrors", False),
        ("server", False),
    ],
)
def test_header_and_token_like_key_names(key, secret):
    assert redact.is_secret_key(key) is secret


@pytest.mark.parametrize(
    "text, shown",
    [
        ("https://bob:hunter2@mirror.example.internal/v2/", "https://***@mirror.example.internal/v2/"),
        ("http://bob@proxy.example:3128", "http://***@proxy.example:3128"),
        ("http://bob:p@ss@proxy.example:3128", "http://***@proxy.example:3128"),  # an unencoded @ in the password
        ("socks5://u:%40pw@10.0.0.1:1080", "socks5://***@10.0.0.1:1080"),
        (
            'endpoint = ["https://a:b@m1", "https://m2", "https://c:d@m3:5000"]',
            'endpoint = ["https://***@m1", "https://m2", "https://***@m3:5000"]',
        ),
        ("Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.payload", "Authorization: Bearer ***"),
        ("a Basic Ym9iOnMzY3IzdA== header", "a Basic *** header"),
        # what is not a credential stays
        ("https://mirror.example.internal/v2/pause@sha256:abc", "https://mirror.example.internal/v2/pause@sha256:abc"),
        ("robot@example.com wrote Basic auth", "robot@example.com wrote Basic auth"),
    ],
)
def test_url_user_info_and_http_credentials_are_masked_in_any_text(text, shown):
    assert redact.mask_text(text) == shown


# containerd 2.x registry hosts: /etc/containerd/certs.d/HOST/hosts.toml (containerd's docs' shape)
HOSTS_TOML_WITH_USERINFO = f"""server = "https://robot:{USERINFO_PASSWORD}@registry.example.internal"

[host."https://robot:{USERINFO_PASSWORD}@mirror.example.internal"]
  capabilities = ["pull", "resolve"]
  [host."https://robot:{USERINFO_PASSWORD}@mirror.example.internal".header]
    X-Api-Key = ["{API_KEY}"]
    Authorization = "Bearer {TOKEN}"
    X-Request-Id = ["gpu-node"]
"""


def test_hosts_toml_server_and_host_urls_and_headers_are_masked_and_the_rest_kept():
    masked = redact.mask_toml(HOSTS_TOML_WITH_USERINFO)
    for secret in (USERINFO_PASSWORD, API_KEY, TOKEN, "robot"):
        assert secret not in masked
    assert 'server = "https://***@registry.example.internal"' in masked
    assert '[host."https://***@mirror.example.internal".header]' in masked
    assert 'X-Api-Key = "***"' in masked and 'X-Request-Id = ["gpu-node"]' in masked
    assert len(masked.splitlines()) == len(HOSTS_TOML_WITH_USERINFO.splitlines())


def with_user_info(text: str) -> str:
    """Every http(s) URL of ``text`` given a user and password, as a site puts them in a mirror or a proxy."""
    return re.sub(r"(https?://)", rf"\1robot:{USERINFO_PASSWORD}@", text)


@pytest.mark.parametrize(
    "path", file_params([path for path in containerd_configs() if "endpoint = [" in path.read_text(errors="replace")])
)
def test_corpus_registry_mirror_endpoints_with_user_info_are_masked(path):
    """containerd configs with registry mirrors (tests/corpus.py): each endpoint given user-info."""
    original = read_text(path)
    try:
        toml_layout.parse(original)
    except Exception:  # noqa: BLE001 - any of tomlkit's faults: the template is refused, so skipped
        pytest.skip(f"{path.name} is a template gpu-node refuses to parse (its diff is withheld)")
    seeded = with_user_info(original)
    assert USERINFO_PASSWORD in seeded
    masked = redact.mask_toml(seeded)
    assert USERINFO_PASSWORD not in masked and "robot" not in masked
    assert masked.count("://***@") >= seeded.count(f"robot:{USERINFO_PASSWORD}@")
    assert len(masked.splitlines()) == len(seeded.splitlines())
    lines = redact.masked_diff_lines(original, seeded, "toml")
    assert lines and USERINFO_PASSWORD not in "\n".join(lines)


@pytest.mark.parametrize(
    "path",
    file_params([path for path in docker_configs() if re.search(r'"(proxies|registry-mirrors)"', path.read_text())]),
)
def test_corpus_docker_proxies_and_mirrors_with_user_info_are_masked_byte_for_byte_otherwise(path):
    """daemon.json files with proxies or registry mirrors (tests/corpus.py): each URL given user-info,
    and an https-proxy added where there was none."""
    original = read_text(path)
    seeded = with_user_info(original)
    if '"proxies"' not in seeded:
        seeded = seeded.replace(
            "{", '{"proxies": {"https-proxy": "http://robot:' + USERINFO_PASSWORD + '@proxy.example:3128"}, ', 1
        )
    json.loads(seeded)
    masked = redact.mask_json(seeded)
    assert USERINFO_PASSWORD not in masked
    assert masked == seeded.replace(f"robot:{USERINFO_PASSWORD}@", "***@")
    assert re.search(r'"https-proxy": "https?://\*\*\*@proxy', masked)


def test_daemon_output_and_its_shell_filter_mask_user_info_and_api_keys_alike():
    lines = [
        f'failed to resolve "https://robot:{USERINFO_PASSWORD}@mirror.example.internal/v2/"',
        f'X-Api-Key = ["{API_KEY}"]',
        f"Authorization: Bearer {TOKEN}",
    ]
    for line in lines:
        shown = subprocess.run(
            ["sh", "-c", redact.shell_daemon_output_filter()],
            input=line + "\n",
            capture_output=True,
            text=True,
            check=True,
        ).stdout.rstrip("\n")
        assert shown == redact.daemon_output(line)
        for secret in (USERINFO_PASSWORD, API_KEY, TOKEN):
            assert secret not in shown


def test_a_failed_hosts_line_masks_the_user_info_it_quotes(caplog):
    from pyinfra.api import State

    from deploy.foundations.run_state import per_run
    from deploy.reports.node_report import FailureNotes

    class Host:
        name, executing_op_hash = "gpu1", "op"

        def log_styled(self, message, fg=None, log_func=None):
            log_func(message)

    caplog.set_level(logging.INFO, logger="pyinfra")
    state = State()
    fail_host(state, Host(), f"https://robot:{USERINFO_PASSWORD}@mirror.example.internal: unreachable")
    assert "gpu-node: https://***@mirror.example.internal: unreachable" in caplog.text
    assert USERINFO_PASSWORD not in caplog.text
    # the line the fleet report keeps is the masked one
    assert per_run(state, FailureNotes)[("gpu1", "op")] == "https://***@mirror.example.internal: unreachable"


def test_the_verify_report_masks_a_mirror_url_the_runtime_quoted(tmp_path):
    """crictl's real failure output (tests/fixtures/crictl), the sandbox image pulled through a
    mirror whose URL carries a password: the report's reason shows the mirror, not the password."""
    from test_verify_steps import CRICTL_OUTPUT, containerd_dump, crictl_lines, node_lines, run_verify

    output = (
        (CRICTL_OUTPUT / "runp-sandbox-image-missing.txt")
        .read_text()
        .strip()
        .replace(
            'failed to get sandbox image \\"registry.k8s.io/pause:3.6\\"',
            f'failed to get sandbox image \\"https://robot:{USERINFO_PASSWORD}@mirror.example.internal/pause:3.6\\"',
        )
    )
    assert USERINFO_PASSWORD in output
    _, record, steps, _ = run_verify(
        tmp_path, node_lines(dump=containerd_dump(), crictl=True), crictl=crictl_lines(runp=(1, output))
    )
    assert "https://***@mirror.example.internal/pause:3.6" in steps["cri_handler"]["reason"]
    assert USERINFO_PASSWORD not in json.dumps(record)
