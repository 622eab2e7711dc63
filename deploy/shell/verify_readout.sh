#!/bin/sh
# VerifyReadout's read (deploy/facts/verification.py), run after NodeSurvey's in one command. Given before
# it: smi_query and smi_persistence_query (nvidia-smi's arguments, words), keys and units (the
# systemd units read, and their output keys), containerd_binary, containerd_service (empty: the
# installation has no unit of its own), containerd_socket, kubelet_config, image; read_base64:
# node_text.base64_reader's.
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
ctrd=$(command -v "$containerd_binary" 2>/dev/null || true)
echo "ctrd_path $ctrd"
if [ -n "$ctrd" ]; then
  # An installation without a unit of its own for containerd (k0s) is up when its socket is.
  [ -n "$containerd_service" ] || echo "ctrd_active $([ -S "$containerd_socket" ] && echo active || echo inactive)"
  ctr=$(command -v ctr 2>/dev/null || command -v "$(dirname "$ctrd")/ctr" 2>/dev/null || true)
  echo "ctr_path $ctr"
  if [ -n "$ctr" ] && [ -S "$containerd_socket" ]; then
    # in the background: the ctr client's start is the slowest read here (the lines are keyed); its
    # line through a file, since one written while a long line is could land inside that one
    { "$ctr" --address "$containerd_socket" images ls -q 2>/dev/null | grep -qxF "$image" && echo "ctr_image 1" || echo "ctr_image 0"; } >>"$_bg" &
  fi
fi
[ -f "$kubelet_config" ] && echo "kubelet_config $(read_base64 "$kubelet_config")"
dk=$(command -v docker 2>/dev/null || true)
echo "docker_path $dk"
if [ -n "$dk" ]; then
  info=$("$dk" info --format '{{json .Runtimes}}|{{.DefaultRuntime}}|{{.CgroupDriver}}' 2>&1); rc=$?
  echo "docker_info_rc $rc"
  echo "docker_info $(printf '%s' "$info" | base64 -w0)"
  { "$dk" image inspect "$image" >/dev/null 2>&1 && echo "docker_image 1" || echo "docker_image 0"; } >>"$_bg" &
fi
echo "crictl_path $(command -v crictl 2>/dev/null || true)"
# One systemctl call for every unit read here (each call is a round trip to systemd): its blocks
# come in the order asked, each printed as "unit <name> <properties>" or as "<key> <ActiveState>".
[ -n "$containerd_service" ] && [ -n "$ctrd" ] && { keys="$keys ctrd_active"; units="$units $containerd_service"; }
[ -n "$dk" ] && { keys="$keys docker_active"; units="$units docker"; }
# shellcheck disable=SC2086 # the unit names, split on purpose
{ command -v systemctl >/dev/null 2>&1 && systemctl show -p LoadState -p ActiveState $units 2>/dev/null; } |
awk -v keys="$keys" 'BEGIN { n = split(keys, key, " "); i = 1 }
  /^$/ { i++; next }
  { props[i] = props[i] " " $0 }
  /^ActiveState=/ { active[i] = substr($0, 13) }
  END { for (j = 1; j <= n; j++) if (key[j] ~ /^unit:/) print "unit " substr(key[j], 6) props[j]; else print key[j] " " active[j] }'
wait
[ "$_bg" = /dev/stdout ] || { cat "$_bg"; rm -f "$_bg"; }
true
