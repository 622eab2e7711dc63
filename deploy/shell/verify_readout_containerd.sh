#!/bin/sh
# containerd's part of VerifyReadout's read (deploy/shell/verify_readout.sh, deploy/runtimes/containerd/verify.py):
# the containerd the node's installation runs. Given before it: containerd_binary, containerd_service
# (empty: the installation has no unit of its own), containerd_socket, image, keys and units; _bg: the
# read's file for lines printed in the background.
# shellcheck disable=SC2154 # the values above: assigned before the script
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
[ -n "$containerd_service" ] && [ -n "$ctrd" ] && { keys="$keys ctrd_active"; units="$units $containerd_service"; }
