#!/bin/sh
# VerifyReadout's read (deploy/facts/verification.py), run after NodeSurvey's in one command; each
# wired runtime's part follows (verify_readout_<runtime>.sh, deploy/runtimes/registry.py), then
# verify_readout_end.sh. Given before it: smi_query and smi_persistence_query (nvidia-smi's
# arguments, words), keys and units (the systemd units read, and their output keys: a runtime's part
# adds its own), kubelet_config, image, the runtimes' own values; read_base64: node_text.base64_reader's.
# shellcheck disable=SC2154 # the values above: assigned before the script
_bg=$(mktemp 2>/dev/null) || _bg=/dev/stdout
[ -r /proc/driver/nvidia/version ] && echo "kmod_version $(head -n 1 /proc/driver/nvidia/version)"
echo "kmod_license $(modinfo -F license nvidia 2>/dev/null | head -n 1)"
smi=$(command -v nvidia-smi 2>/dev/null || true)
echo "smi_path $smi"
if [ -n "$smi" ]; then
  # shellcheck disable=SC2086 # the query is words, split on purpose (no glob in them)
  out=$("$smi" $smi_query 2>&1); rc=$?
  echo "smi_rc $rc"
  echo "smi_out $(printf '%s' "$out" | base64 -w0)"
  [ "$rc" = 0 ] && echo "smi_list $("$smi" -L 2>&1 | base64 -w0)"
  # shellcheck disable=SC2086 # the query is words, split on purpose (no glob in them)
  [ "$rc" = 0 ] && echo "smi_persistence $("$smi" $smi_persistence_query 2>&1 | base64 -w0)"
fi
ctk=$(command -v nvidia-ctk 2>/dev/null || true)
[ -n "$ctk" ] && echo "ctk_version $("$ctk" --version 2>/dev/null | head -n 1)"
ncr=$(command -v nvidia-container-runtime 2>/dev/null || true)
echo "ncr_path $ncr"
[ -f "$kubelet_config" ] && echo "kubelet_config $(read_base64 "$kubelet_config")"
echo "crictl_path $(command -v crictl 2>/dev/null || true)"
