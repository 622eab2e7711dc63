#!/usr/bin/env bash
# Make a Docker engine available on a test machine whose PID 1 is not systemd:
# install docker.io and debootstrap when missing, start dockerd in the background.
# Also the tools tests use to build the local toolkit repositories (apt-ftparchive, gpg).
set -euo pipefail

need_apt=()
command -v dockerd >/dev/null 2>&1 || need_apt+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v apt-ftparchive >/dev/null 2>&1 || need_apt+=(apt-utils)
command -v gpg >/dev/null 2>&1 || need_apt+=(gnupg)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)  # the lab cluster's certificates
if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
    exit 0
fi

log=${DOCKERD_LOG:-/var/log/gpu-node-dockerd.log}
# No bridge and no iptables: tests use --network host only.
nohup dockerd --bridge=none --iptables=false >"$log" 2>&1 &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 1
done
echo "dockerd did not come up within 60 s; its log: $log" >&2
tail -n 30 "$log" >&2
exit 1
