"""deploy/fleet/rollout.py (gpu-node-rollout): batch splitting, reading pyinfra's --json results, when a batch
stops the rollout, its command line."""

from __future__ import annotations

import json

import pytest

from deploy.fleet import rollout


@pytest.mark.parametrize(
    ("spec", "total", "sizes"),
    [
        ("1,5,25%", 20, [1, 5, 5, 5, 4]),  # 25% of 20 is 5, repeated; the last batch takes the rest
        ("1,5,25%", 100, [1, 5, 25, 25, 25, 19]),
        ("1,100%", 3, [1, 2]),  # the default: a canary, then everyone else
        ("1,100%", 1, [1]),
        ("2", 5, [2, 2, 1]),
        ("10", 3, [3]),
        ("10%", 5, [1, 1, 1, 1, 1]),  # a percentage rounds down but is never 0 hosts
        ("50%", 3, [1, 1, 1]),
        ("1, 2", 6, [1, 2, 2, 1]),
    ],
)
def test_batch_sizes_count_percent_of_all_hosts_and_repeat_the_last(spec, total, sizes):
    assert rollout.batch_sizes(spec, total) == sizes
    assert sum(sizes) == total


@pytest.mark.parametrize("spec", ["0", "-1", "abc", "0%", "101%", "", "1,,2", "1.5", "nan%"])
def test_batch_sizes_reject_what_is_not_a_size_naming_it(spec):
    with pytest.raises(rollout.RolloutError, match="invalid batch size") as error:
        rollout.batch_sizes(spec, 10)
    assert repr(spec) in str(error.value)


def test_split_batches_keeps_inventory_order_and_every_host_once():
    hosts = [f"gpu{n}" for n in range(7)]
    batches = rollout.split_batches(hosts, "1,2,50%")
    assert batches == [["gpu0"], ["gpu1", "gpu2"], ["gpu3", "gpu4", "gpu5"], ["gpu6"]]


def pyinfra_json(operations: list[dict], failed_hosts: list[str]) -> str:
    """The shape of `pyinfra --json` output after a run (pyinfra_cli.prints.print_run_json)."""
    return json.dumps({"plan": [], "results": {"operations": operations, "totals": {}, "failed_hosts": failed_hosts}})


def test_read_batch_result_counts_changes_per_host_and_names_failed_hosts():
    out = pyinfra_json(
        [
            {"name": "Add repo", "success": ["a", "b"], "error": ["c"], "no_change": []},
            {"name": "Install", "success": ["a"], "error": ["c"], "no_change": ["b"]},
        ],
        failed_hosts=["c"],
    )
    result = rollout.read_batch_result(1, ["a", "b", "c"], 1, out)
    assert result.failed == ["c"]
    assert result.converged() == ["a", "b"]
    assert result.changes == {"a": 2, "b": 1, "c": 0}
    assert result.stopped == ""


def test_read_batch_result_without_results_counts_every_host_failed():
    # pyinfra prints no JSON when --fail-percent stops it, or no host is left.
    result = rollout.read_batch_result(2, ["a", "b"], 1, "")
    assert result.failed == ["a", "b"]
    assert "stopped the batch (exit 1)" in result.stopped


def test_read_batch_result_nonzero_exit_without_a_failed_host_fails_the_batch():
    result = rollout.read_batch_result(1, ["a"], 1, pyinfra_json([], failed_hosts=[]))
    assert result.failed == ["a"]
    assert result.stopped


def test_a_batch_awaiting_a_reboot_is_done_not_failed():
    # pyinfra's run exits 3 (deploy/reports/exit_status.py) when every host is done but a GPU node awaits the
    # reboot its driver change needs: the batch is not failed, the rollout goes on and says it.
    result = rollout.read_batch_result(1, ["a", "b"], 3, pyinfra_json([], failed_hosts=[]))
    assert result.failed == [] and result.stopped == "" and result.reboot_required
    assert rollout.is_batch_failed(result, 0) is False
    assert "awaits the reboot" in "\n".join(rollout.summary([["a", "b"]], [result], 0))
    failed = rollout.read_batch_result(1, ["a", "b"], 1, pyinfra_json([], failed_hosts=["b"]))
    assert failed.failed == ["b"] and not failed.reboot_required


def test_a_rollout_whose_hosts_await_a_reboot_exits_3_and_runs_every_batch(inventory_file, monkeypatch, tmp_path):
    (tmp_path / "site.py").write_text("")
    ran = []

    def batch(number, hosts, *args):
        ran.append(hosts)
        return rollout.BatchResult(number, hosts, reboot_required=number == 1)

    monkeypatch.setattr(rollout, "run_batch", batch)
    assert rollout.main(["--batches", "1,100%", inventory_file, "site.py"]) == 3
    assert ran == [["gpu3"], ["gpu1", "gpu2", "cp1"]]


def test_a_batch_fails_above_fail_percent_not_at_it():
    one_of_four = rollout.BatchResult(1, ["a", "b", "c", "d"], failed=["b"])
    assert rollout.is_batch_failed(one_of_four, 25) is False
    assert rollout.is_batch_failed(one_of_four, 24) is True
    assert rollout.is_batch_failed(rollout.BatchResult(1, ["a"]), 0) is False
    assert rollout.is_batch_failed(rollout.BatchResult(1, ["a"], stopped="pyinfra exited 1"), 100) is True


def test_summary_names_converged_failed_and_untouched_hosts():
    batches = [["a"], ["b", "c"], ["d"]]
    results = [
        rollout.BatchResult(1, ["a"], changes={"a": 3}),
        rollout.BatchResult(2, ["b", "c"], failed=["c"], changes={"b": 2, "c": 0}),
    ]
    text = "\n".join(rollout.summary(batches, results, fail_percent=0))
    assert "STOPPED at batch 2 of 3" in text
    assert "converged    a (3 operation(s) changed)" in text
    assert "converged    b (2 operation(s) changed)" in text
    assert "FAILED       c" in text
    assert "batch 3: not started" in text
    assert "not touched  d" in text


def test_summary_of_a_finished_rollout():
    text = "\n".join(rollout.summary([["a"]], [rollout.BatchResult(1, ["a"], changes={"a": 0})], 0))
    assert text.startswith("rollout finished")
    assert "STOPPED" not in text and "not touched" not in text


@pytest.mark.parametrize("option", ["--limit", "--limit=gpu1", "--exclude", "--fail-percent", "--dry"])
def test_pyinfra_options_the_rollout_owns_are_refused(option, capsys):
    with pytest.raises(SystemExit) as exit_info:
        rollout.parse_args(["inventory.py", "deploy/gpu_node.py", "--data", "a=b", option, "x"])
    assert exit_info.value.code == 2
    assert option in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-size", "0"], "--batch-size 0"),
        (["--fail-percent", "101"], "--fail-percent 101"),
        (["--batch-size", "2", "--batches", "1,2"], "not allowed with"),
    ],
)
def test_bad_rollout_options_stop_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit):
        rollout.parse_args([*argv, "inventory.py", "deploy/gpu_node.py"])
    assert message in capsys.readouterr().err


def test_pyinfra_arguments_pass_through_and_batch_size_becomes_the_spec():
    args = rollout.parse_args(
        ["--batch-size", "3", "inv.py", "deploy/gpu_node.py", "--data", "stages=toolkit", "--serial"]
    )
    assert args.batches == "3"
    assert args.pyinfra_args == ["--data", "stages=toolkit", "--serial"]
    assert rollout.parse_args(["inv.py", "deploy/gpu_node.py"]).batches == "1,100%"


@pytest.fixture
def inventory_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "fleet.py"
    path.write_text(
        'gpu_nodes = ["gpu3", ("gpu1", {"nvidia_driver_branch": "550"}), "gpu2"]\n'
        'control_plane = ["cp1"]\n'
        'canary = ["gpu1"]\n'
    )
    return str(path)


def test_inventory_hosts_come_from_pyinfras_loader_in_inventory_order(inventory_file):
    assert rollout.inventory_hosts(inventory_file, []) == ["gpu3", "gpu1", "gpu2", "cp1"]


def test_limit_matches_groups_and_globs_as_pyinfra_does(inventory_file):
    assert rollout.inventory_hosts(inventory_file, ["gpu_nodes"]) == ["gpu3", "gpu1", "gpu2"]
    assert rollout.inventory_hosts(inventory_file, ["cp*", "canary"]) == ["gpu1", "cp1"]
    with pytest.raises(rollout.RolloutError, match="'nothing' matches no group or host"):
        rollout.inventory_hosts(inventory_file, ["nothing"])


def test_a_host_named_like_a_group_is_refused(tmp_path, monkeypatch):
    # pyinfra's --limit would take the whole group for that name.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleet.py").write_text('gpu_nodes = ["gpu1", "canary"]\ncanary = ["gpu1"]\n')
    with pytest.raises(rollout.RolloutError, match="host 'canary' has the name of a group"):
        rollout.inventory_hosts(str(tmp_path / "fleet.py"), [])


def test_an_inventory_that_does_not_load_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleet.py").write_text("gpu_nodes = [\n")
    with pytest.raises(rollout.RolloutError, match="cannot load inventory"):
        rollout.inventory_hosts(str(tmp_path / "fleet.py"), [])


def test_help_names_the_console_script_and_runs_nothing(capsys, monkeypatch):
    monkeypatch.setattr(rollout, "run_batch", lambda *args: pytest.fail("--help ran a batch"))
    with pytest.raises(SystemExit) as exit_info:
        rollout.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gpu-node-rollout ") and "INVENTORY DEPLOY" in out


@pytest.mark.parametrize(
    ("inventory", "deploy", "named"),
    [
        ("missing_inventory.py", "deploy/gpu_node.py", "inventory file missing_inventory.py: no such file"),
        ("@local", "missing_deploy.py", "deploy file missing_deploy.py: no such file"),
    ],
)
def test_a_missing_inventory_or_deploy_file_is_one_line_naming_it_exit_2(
    inventory, deploy, named, capsys, monkeypatch, tmp_path
):
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "gpu_node.py").write_text("")
    monkeypatch.chdir(tmp_path)
    # pyinfra's loader would take a missing inventory file for a host name and look it up
    monkeypatch.setattr(rollout, "make_inventory", lambda *args, **kwargs: pytest.fail("the inventory was loaded"))
    monkeypatch.setattr(rollout, "run_batch", lambda *args: pytest.fail("a batch ran"))
    assert rollout.main([inventory, deploy]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"gpu-node-rollout: error: {named}\n"
    assert captured.out == ""
