"""
The safety calls inside the stages: each check or refusal a stage makes before it changes a node (or
that stops a change going wrong), where it sits (its text, once in its file), and the plan tests,
through the stage or the deploy file, that go red when it is removed. scripts/mutation.py removes
each (``calls --safety``: its statement, or ``text`` replaced by ``replacement``) and runs its tests;
tests/unit/test_safety_calls.py holds the table to the code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SafetyCall:
    name: str
    path: str
    # the call's text, once in its file: its statement is removed, or ``replacement`` put in its place
    text: str
    # the tests (pytest ids, a test's every case) each of which goes red without it
    tests: tuple[str, ...]
    replacement: str | None = None


def _unit(name: str) -> str:
    return f"tests/unit/{name}"


RELOAD_THROUGH_THE_STAGE = "test_the_driver_stage_runs_the_reload_only_where_its_holders_read_finds_no_other_process"
RUNTIME_WITHOUT_CDI = "test_through_the_deploy_a_runtime_without_cdi_is_refused_in_preflight_before_the_kernel_stage"
DRIVER, PREFLIGHT, ENTRY, STAGES = (
    "deploy/tasks/driver.py",
    "deploy/tasks/preflight.py",
    "deploy/entry.py",
    "deploy/stages.py",
)

SAFETY_CALLS: tuple[SafetyCall, ...] = (
    # --- the driver stage
    SafetyCall(
        "driver: no reboot into a kernel without the NVIDIA module",
        DRIVER,
        "kernel_modules.refuse_reboot_without_module(_if=reboot.did_change)",
        (_unit("test_kernel_coverage.py::test_through_the_driver_stage_the_refusal_comes_before_any_drain_or_reboot"),),
    ),
    SafetyCall(
        "driver: the module built for every installed kernel",
        DRIVER,
        "kernel_modules.cover_installed_kernels(settings, platform)",
        (
            _unit(
                "test_kernel_coverage.py::test_through_the_driver_stage_every_installed_kernel_gets_its_headers_and_a_dkms_build"
            ),
        ),
    ),
    SafetyCall(
        "driver: the reload decided on the holders the node reads",
        "deploy/operations/driver_reload.py",
        "plan = reload_plan(reading)",
        (_unit(f"test_driver_updates.py::{RELOAD_THROUGH_THE_STAGE}"),),
        replacement='plan = reload_plan({**reading, "holders": []})',
    ),
    SafetyCall(
        "driver: no reload while a process other than the driver's services holds the GPU",
        "deploy/driver/reload.py",
        "    if others:\n        return ReloadPlan(reboot=",
        (_unit(f"test_driver_updates.py::{RELOAD_THROUGH_THE_STAGE}"),),
    ),
    SafetyCall(
        "driver: the node drained before the reboot",
        DRIVER,
        "drain_ops.drain_before_reboot(",
        (
            _unit(
                "test_drain_plan.py::test_reboot_after_a_driver_change_drains_first_and_a_later_runtime_restart_does_not_drain_again"
            ),
        ),
    ),
    SafetyCall(
        "driver: a package manager still busy after the bounded wait refuses the host",
        DRIVER,
        'raise HostRefusal(waited["busy"])',
        (_unit("test_driver_plans.py::test_through_the_driver_stage_a_package_manager_still_busy_refuses_the_host"),),
    ),
    # --- preflight and the table of steps it asks
    SafetyCall(
        "preflight: not Linux, not root, no systemd",
        PREFLIGHT,
        'access_refusal(facts["HostAccess"], image_root)',
        (
            _unit(
                "test_preflight_driver.py::test_a_node_gpu_node_cannot_work_on_is_refused_in_one_line_before_any_change"
            ),
        ),
        replacement="None",
    ),
    SafetyCall(
        "preflight: the family's package manager missing",
        PREFLIGHT,
        'package_manager_refusal(facts["HostAccess"], platform)',
        (
            _unit(
                "test_preflight_driver.py::test_a_node_gpu_node_cannot_work_on_is_refused_in_one_line_before_any_change"
            ),
        ),
        replacement="None",
    ),
    SafetyCall(
        "preflight: its errors (no GPU with require_gpu, disk) stop the host",
        PREFLIGHT,
        'raise PreflightError("; ".join(errors))',
        (
            _unit("test_preflight_driver.py::test_no_gpu_with_require_gpu_stops_before_any_change"),
            _unit("test_preflight_driver.py::test_too_little_free_disk_stops_before_any_change"),
            _unit("test_preflight_driver.py::test_every_reason_to_stop_is_in_the_one_refusal_line"),
        ),
    ),
    SafetyCall(
        "preflight: each stage's refusals counted",
        PREFLIGHT,
        "errors += check.errors",
        (
            _unit(f"test_containerd_plan.py::{RUNTIME_WITHOUT_CDI}"),
            _unit("test_dra_node.py::test_an_old_driver_is_refused_in_preflight_before_any_change"),
        ),
    ),
    SafetyCall(
        "preflight: a busy or interrupted package manager waited for and finished first",
        PREFLIGHT,
        'recover_package_manager(settings, facts["PackageManagerState"])',
        (_unit("test_recovery.py::test_a_held_lock_makes_the_wait_the_first_command_of_the_run"),),
    ),
    SafetyCall(
        "stages: the driver's plan refusals asked in preflight",
        STAGES,
        "check=driver.preflight_check,",
        (_unit("test_driver_plans.py::test_ubuntu_without_branch_or_recommendation_stops_before_any_change"),),
        replacement="",
    ),
    SafetyCall(
        "stages: the toolkit's pin refusal asked in preflight",
        STAGES,
        "check=toolkit.preflight_check,",
        (
            _unit(
                "test_toolkit_plan.py::test_through_the_deploy_a_pin_arch_cannot_honour_is_refused_in_preflight_before_the_kernel_stage"
            ),
        ),
        replacement="",
    ),
    SafetyCall(
        "stages: containerd's CDI refusal asked in preflight",
        STAGES,
        "check=containerd.preflight_check,",
        (_unit(f"test_containerd_plan.py::{RUNTIME_WITHOUT_CDI}"),),
        replacement="",
    ),
    SafetyCall(
        "stages: Docker's CDI refusal asked in preflight",
        STAGES,
        "check=docker.preflight_check,",
        (_unit(f"test_containerd_plan.py::{RUNTIME_WITHOUT_CDI}"),),
        replacement="",
    ),
    SafetyCall(
        "stages: the runtime mode's refusal asked in preflight",
        STAGES,
        "check=lambda s, platform, nvidia: cdi.preflight_check(s, platform, nvidia, wired_runtimes(s)),",
        (
            _unit(
                "test_runtime_mode.py::test_through_the_deploy_cdi_mode_where_the_runtime_has_cdi_off_is_refused_in_preflight_"
                "before_the_kernel_stage"
            ),
        ),
        replacement="",
    ),
    SafetyCall(
        "stages: the DRA node's refusals asked in preflight",
        STAGES,
        "check=dra.preflight_check,",
        (_unit("test_dra_node.py::test_an_old_driver_is_refused_in_preflight_before_any_change"),),
        replacement="",
    ),
    *(
        SafetyCall(
            f"stages: the {stage} stage waits for a busy package manager first",
            STAGES,
            f"check={stage}.preflight_check,\n        installs=True,",
            (
                _unit(
                    "test_recovery.py::test_each_stage_that_installs_waits_alone_for_a_held_lock_before_its_first_change"
                ),
            ),
            replacement=f"check={stage}.preflight_check,",
        )
        for stage in ("driver", "toolkit", "containerd", "docker")
    ),
    # --- the entry file's deploy
    SafetyCall(
        "entry: a host preflight refused fails, before any change",
        ENTRY,
        'fail(name="Refuse this host (preflight)", message=str(refusal))',
        (_unit("test_preflight_driver.py::test_no_gpu_with_require_gpu_stops_before_any_change"),),
    ),
    SafetyCall(
        "entry: a host outside the GPU nodes' group refused",
        ENTRY,
        'fail(name=f"Refuse this host (not in {settings.gpu_nodes_group})", message=refusal)',
        (_unit("test_entry_groups.py::test_a_host_in_a_misnamed_group_is_refused_in_one_line_and_others_go_on"),),
    ),
    SafetyCall(
        "entry: the control plane checked able to drain before any change",
        ENTRY,
        "drain = checked_drain_target(node)",
        (_unit("test_drain_plan.py::test_unreachable_api_stops_the_host_before_any_change_no_real_cluster"),),
        replacement="drain = None",
    ),
    SafetyCall(
        "entry: a host the undo refused fails, before any change",
        ENTRY,
        'fail(name="Refuse this host (undo)", message=str(refusal))',
        (
            _unit("test_undo_plan.py::test_the_undo_acts_only_on_records_in_a_root_owned_0700_folder"),
            _unit("test_undo_plan.py::test_the_undo_refuses_a_node_it_cannot_work_on_before_any_change"),
        ),
    ),
    *(
        SafetyCall(
            f"entry: {function}'s keyword settings checked before any change",
            ENTRY,
            f'call_settings(host.state, settings, "{function}")',
            (_unit("test_api.py::test_an_unknown_keyword_stops_the_run_in_one_line_before_any_command"),),
        )
        for function in ("provision_gpu_node", "undo_gpu_node")
    ),
    # --- live nodes: the drain
    SafetyCall(
        "drain: no control-plane host to drain through refuses the host",
        "deploy/tasks/drain.py",
        'f"drain_before_restart=true but the inventory has no',
        (_unit("test_drain_plan.py::test_no_control_plane_group_stops_the_host_before_any_change"),),
    ),
    SafetyCall(
        "drain: an unreachable API server refuses the host",
        "deploy/tasks/drain.py",
        'f"drain_before_restart=true but {control_plane.name} cannot reach',
        (_unit("test_drain_plan.py::test_unreachable_api_stops_the_host_before_any_change_no_real_cluster"),),
    ),
    SafetyCall(
        "containerd: the node drained before the restart",
        "deploy/tasks/containerd.py",
        "before_restart=drain_ops.before_restart(drain),",
        (
            _unit(
                "test_drain_plan.py::test_cordon_then_drain_with_the_flags_and_bound_then_restart_then_uncordon_no_real_cluster"
            ),
        ),
        replacement="before_restart=(),",
    ),
    SafetyCall(
        "Docker: the node drained before the restart",
        "deploy/tasks/docker.py",
        "before_restart=drain_ops.before_restart(drain),",
        (_unit("test_drain_plan.py::test_docker_restart_is_drained_for_like_containerd_no_real_cluster"),),
        replacement="before_restart=(),",
    ),
    # --- the runtimes stage
    SafetyCall(
        "containerd: missing and containerd_install=false fails the host",
        "deploy/tasks/containerd.py",
        'name="Check that containerd is installed"',
        (_unit("test_containerd_plan.py::test_missing_containerd_without_install_fails_with_what_to_do"),),
    ),
    SafetyCall(
        "Docker: missing and docker_install=false fails the host",
        "deploy/tasks/docker.py",
        'name="Check that Docker is installed"',
        (_unit("test_containerd_plan.py::test_docker_missing_without_install_names_the_setting_and_the_package"),),
    ),
    SafetyCall(
        "Docker: no package of the family to install fails the host",
        "deploy/tasks/docker.py",
        'name="Check that Docker can be installed"',
        (_unit("test_containerd_plan.py::test_docker_install_on_rhel_says_there_is_no_distribution_package"),),
    ),
    SafetyCall(
        "runtimes: the real daemon checks the candidate config before the swap",
        "deploy/operations/runtime_config.py",
        "if plan.check is not None and not (yield from plan.check(plan)):",
        (_unit("test_containerd_plan.py::test_candidate_that_containerd_would_not_run_wired_is_never_installed"),),
    ),
    # --- signed repositories
    SafetyCall(
        "repositories: the key's fingerprint checked against its pin before apt or rpm trusts it",
        "deploy/operations/download.py",
        'f\'for fingerprint in $served; do case " {pinned} " in *" $fingerprint "*) ;; *)\'',
        (
            _unit(
                "test_download.py::test_a_valid_key_whose_fingerprint_is_not_pinned_is_refused_in_one_line_naming_both"
            ),
            _unit(
                "test_toolkit_plan.py::test_through_the_toolkit_stage_a_key_whose_fingerprint_is_not_pinned_is_refused"
            ),
        ),
        replacement="f'for fingerprint in $served; do case \" {pinned} \" in *) ;; *)'",
    ),
    SafetyCall(
        "repositories: an apt source without a pinned fingerprint refused",
        "deploy/operations/download.py",
        "refusal = key_refusal(key_url, fingerprints, fingerprint_setting)\n        if refusal:\n"
        "            yield failing_command(refusal)\n            return\n        apt_sources_changed()",
        (_unit("test_download.py::test_a_key_that_cannot_be_checked_fails_the_host_before_any_download"),),
        replacement="apt_sources_changed()",
    ),
    # --- the DRA node: IMEX
    SafetyCall(
        "DRA: IMEX masked only where no job holds a channel",
        "deploy/operations/dra.py",
        "holders_script([IMEX_UNIT])\n        + check\n        + ",
        (_unit("test_dra_node.py::test_the_nodes_mask_command_masks_nothing_while_a_job_holds_a_channel"),),
        replacement="holders_script([IMEX_UNIT])\n        + ",
    ),
    SafetyCall(
        "DRA: the node drained before the mask where a job holds a channel",
        "deploy/tasks/dra.py",
        'drain = drain if imex_in_use(node["imex"]) else None',
        (
            _unit(
                "test_dra_node.py::test_with_drain_before_restart_a_job_holding_an_imex_channel_is_drained_first_then_the_mask"
            ),
        ),
        replacement="drain = None",
    ),
    # --- the undo
    SafetyCall(
        "undo: records in a folder not root's alone are refused",
        "deploy/tasks/undo.py",
        "refusal = records_refusal(records)",
        (_unit("test_undo_plan.py::test_the_undo_acts_only_on_records_in_a_root_owned_0700_folder"),),
        replacement="refusal = None",
    ),
    SafetyCall(
        "undo: not Linux, not root, no systemd",
        "deploy/tasks/undo.py",
        'refusal = access_refusal(facts["HostAccess"])',
        (_unit("test_undo_plan.py::test_the_undo_refuses_a_node_it_cannot_work_on_before_any_change"),),
        replacement="refusal = None",
    ),
    SafetyCall(
        "undo: the keys gpu-node imported taken back out of rpm's database",
        "deploy/tasks/undo.py",
        "undo_ops.remove_rpm_keys(",
        (
            _unit(
                "test_undo_plan.py::test_the_keys_gpu_node_imported_into_rpms_database_are_taken_back_out_and_only_those"
            ),
        ),
    ),
    SafetyCall(
        "undo: a file changed after the undo read it is left as it is",
        "deploy/operations/undo.py",
        "header + _unchanged_since_read(undo) + active + rest",
        (_unit("test_undo_plan.py::test_a_file_changed_after_the_undo_read_it_is_left_as_it_is_in_one_line"),),
        replacement="header + active + rest",
    ),
    # --- pull mode
    SafetyCall(
        "pull: the settings file read through pull_settings' checks, never raw",
        "deploy/pull.py",
        '.load(".node.pull_settings").settings_from_file()',
        (
            _unit(
                "test_pull_settings.py::test_pull_py_run_as_pyinfra_runs_it_refuses_a_missing_or_untrusted_file_before_any_operation"
            ),
        ),
        replacement='.load(".node.pull_settings").SETTINGS_FILE\n'
        'settings = __import__("tomllib").loads(Path(settings).read_text())',
    ),
    # --- the cluster and its files
    SafetyCall(
        "cluster: a cluster without DRA (older than 1.34) refused",
        "deploy/tasks/dra_cluster.py",
        'name="Check the cluster serves DRA (resource.k8s.io/v1)"',
        (_unit("test_dra_cluster_plan.py::test_a_cluster_older_than_1_34_is_refused_in_one_line"),),
    ),
    SafetyCall(
        "cluster: kubectl-inspect-gpushare only at its pinned SHA-256",
        "deploy/tasks/gpushare.py",
        "inspect = checked_inspect_source(settings)",
        (_unit("test_gpushare_plan.py::test_local_inspect_file_with_a_wrong_checksum_is_refused_before_any_change"),),
        replacement='inspect = (settings.gpushare_inspect_source, settings.gpushare_inspect_sha256 or "") '
        "if settings.gpushare_inspect_install else None",
    ),
    SafetyCall(
        "GitOps: a link at a file or folder to write refuses the render",
        "deploy/tasks/gitops.py",
        "        for relative in rendered:\n            controller_files.check_path(targets[relative])",
        (_unit("test_render_cluster.py::test_a_link_at_a_rendered_file_is_refused_and_its_target_kept"),),
        replacement="        pass",
    ),
)
