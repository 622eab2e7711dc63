#!/bin/sh
# Docker's part of VerifyReadout's read (deploy/shell/verify_readout.sh, deploy/runtimes/docker/verify.py):
# docker info and the image. Given before it: image, keys and units; _bg: the read's file for lines
# printed in the background.
# shellcheck disable=SC2154 # the values above: assigned before the script
dk=$(command -v docker 2>/dev/null || true)
echo "docker_path $dk"
if [ -n "$dk" ]; then
  info=$("$dk" info --format '{{json .Runtimes}}|{{.DefaultRuntime}}|{{.CgroupDriver}}' 2>&1); rc=$?
  echo "docker_info_rc $rc"
  echo "docker_info $(printf '%s' "$info" | base64 -w0)"
  { "$dk" image inspect "$image" >/dev/null 2>&1 && echo "docker_image 1" || echo "docker_image 0"; } >>"$_bg" &
fi
[ -n "$dk" ] && { keys="$keys docker_active"; units="$units docker"; }
