#!/bin/sh
# CudaInit's read (deploy/facts/cuda.py): cuInit through the driver's libcuda.so.1 by the node's
# python3 (or RHEL's platform-python). Given before it: cuda_init (the Python script),
# timeout_seconds (a driver that hangs must not hang the read).
# shellcheck disable=SC2154 # cuda_init, timeout_seconds: assigned before the script
py=$(command -v python3 2>/dev/null || { [ -x /usr/libexec/platform-python ] && echo /usr/libexec/platform-python; } || true)
echo "cuda_python $py"
if [ -n "$py" ]; then
  # -I -S: the node's PYTHON* variables and site-packages play no part (ctypes is all it needs)
  # every device, whatever the caller's environment says (unset here: env would be one more process)
  unset CUDA_VISIBLE_DEVICES
  if command -v timeout >/dev/null 2>&1; then
    timeout "$timeout_seconds" "$py" -I -S -c "$cuda_init" 2>/dev/null
  else
    "$py" -I -S -c "$cuda_init" 2>/dev/null
  fi
  echo "cuda_exit $?"
fi
true
