#!/bin/sh
# CrictlRun's probe (deploy/operations/probes.py): through the CRI, a sandbox run with the runtime handler,
# then (run_container=1) a container in it, and (run_cdi=1) one given a CDI device; each step
# printed as "step <name> <exit code> <output, base64>". Given before it: socket, handler, image,
# timeout (seconds a container has to exit), pod_json, container_json, cdi_json (the CRI configs).
# shellcheck disable=SC2154 # the values above: assigned before the script
d=$(mktemp -d /tmp/gpu-node-verify.XXXXXX) || { echo "step setup 1"; exit 0; }
cri() {
  if [ -f /etc/crictl.yaml ]; then crictl "$@"
  else crictl --runtime-endpoint "unix://$socket" --image-endpoint "unix://$socket" "$@"; fi
}
printf '%s\n' "$pod_json" > "$d/pod.json"
printf '%s\n' "$container_json" > "$d/container.json"
printf '%s\n' "$cdi_json" > "$d/cdi.json"
report() { echo "step $1 $2 $(printf '%s' "$3" | head -c 2000 | base64 -w0)"; }
# $1: the steps' prefix, $2: the container's config. Create, start, wait for, read and remove it.
run_container() {
  out=$(cri create "$pod" "$2" "$d/pod.json" 2>&1); rc=$?; report "${1}create" $rc "$out"
  ctr=$(printf '%s' "$out" | tail -n 1)
  [ "$rc" = 0 ] || return 0
  out=$(cri start "$ctr" 2>&1); rc=$?; report "${1}start" $rc "$out"
  i=0; state=""
  while [ "$i" -lt "$timeout" ]; do
    state=$(cri inspect -o go-template --template '{{.status.state}} {{.status.exitCode}}' "$ctr" 2>/dev/null)
    case "$state" in CONTAINER_EXITED*) break;; esac
    i=$((i + 1)); sleep 1
  done
  report "${1}state" 0 "$state"
  out=$(cri logs "$ctr" 2>&1); rc=$?; report "${1}logs" $rc "$out"
  out=$(cri rm -f "$ctr" 2>&1); rc=$?; report "${1}rm" $rc "$out"
}
out=$(cri runp --runtime "$handler" "$d/pod.json" 2>&1); rc=$?; report runp $rc "$out"
pod=""; [ "$rc" = 0 ] && pod=$(printf '%s' "$out" | tail -n 1)
if [ "$rc" = 0 ] && [ "$run_container" = 1 ] && ! cri inspecti "$image" >/dev/null 2>&1; then
  report image 1 "image not present"
elif [ "$rc" = 0 ] && [ "$run_container" = 1 ]; then
  run_container "" "$d/container.json"
  [ "$run_cdi" = 1 ] && run_container cdi_ "$d/cdi.json"
fi
if [ -n "$pod" ]; then
  out=$(cri stopp "$pod" 2>&1); rc=$?; report stopp $rc "$out"
  out=$(cri rmp "$pod" 2>&1); rc=$?; report rmp $rc "$out"
fi
rm -rf "$d"
true
