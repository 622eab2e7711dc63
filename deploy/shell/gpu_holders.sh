#!/bin/sh
# gpu_holders DEVICE...: who holds each of the given character devices that exist (psmisc's fuser),
# one line each: "holder PID UNIT USER DEVICE COMMAND". UNIT is the one of $services (space
# separated, given before) whose stop ends the process, else "-": its MainPID, or any process in its
# control group where its KillMode stops the whole group (control-group, mixed: a service's forked
# helpers, DCGM's diagnostics). Never a process name: any user can name a process
# "nvidia-persistenced", and only root can put a process in a system unit's control group.
# USER, DEVICE and COMMAND with every byte outside printable ASCII (USER and DEVICE: and spaces) as "?".
# Read by DeviceHolders, DraNodeState and the reload and IMEX scripts (deploy/driver/reload.py).
# gh_named turns gpu_holders' lines into "COMMAND (pid N, user U) holds DEVICE; ..." (Holder.named).
# shellcheck disable=SC2154 # services: assigned before the script
gh_units() {
    for gh_unit in $services; do
        [ "$(systemctl is-active "$gh_unit" 2>/dev/null)" = active ] || continue
        gh_main=$(systemctl show -p MainPID --value "$gh_unit" 2>/dev/null)
        gh_kill=$(systemctl show -p KillMode --value "$gh_unit" 2>/dev/null)
        gh_group=$(systemctl show -p ControlGroup --value "$gh_unit" 2>/dev/null)
        printf '%s %s %s %s\n' "$gh_unit" "${gh_main:-0}" "${gh_kill:--}" "${gh_group:--}"
    done
}

# gh_unit_of PID: the unit of $gh_active (gh_units' lines) whose stop ends PID, else "-"
gh_unit_of() {
    # the systemd hierarchy's line: cgroup v1's name=systemd, else v2's unified one
    gh_in=$(sed -n 's/^[0-9]*:name=systemd://p; s/^0:://p' "/proc/$1/cgroup" 2>/dev/null | head -n 1)
    while read -r gh_unit gh_main gh_kill gh_group; do
        if [ "$gh_main" = "$1" ]; then printf '%s\n' "$gh_unit"; return; fi
        case $gh_kill in control-group | mixed) ;; *) continue ;; esac
        if [ -z "$gh_in" ] || [ "$gh_group" = - ]; then continue; fi
        case $gh_in in "$gh_group" | "$gh_group"/*) printf '%s\n' "$gh_unit"; return ;; esac
    done <<EOF
$gh_active
EOF
    echo -
}

gh_text() { printf '%s' "$1" | LC_ALL=C tr -c '[:print:]' '?'; }
gh_word() { printf '%s' "${1:-?}" | LC_ALL=C tr -c '[:graph:]' '?'; }

gpu_holders() {
    gh_active=$(gh_units)
    for gh_device in "$@"; do
        [ -c "$gh_device" ] || continue
        # fuser prints the PIDs on stdout, an access letter after some (m: mapped)
        for gh_pid in $(fuser "$gh_device" 2>/dev/null); do
            gh_pid=${gh_pid%%[!0-9]*}
            [ -n "$gh_pid" ] || continue
            printf 'holder %s %s %s %s %s\n' "$gh_pid" "$(gh_unit_of "$gh_pid")" \
                "$(gh_word "$(stat -c %U "/proc/$gh_pid" 2>/dev/null)")" "$(gh_word "$gh_device")" \
                "$(gh_text "$(cat "/proc/$gh_pid/comm" 2>/dev/null)")"
        done
    done
}

gh_named() {
    while read -r _ gh_pid _ gh_user gh_device gh_command; do
        printf '%s (pid %s, user %s) holds %s; ' "$gh_command" "$gh_pid" "$gh_user" "$gh_device"
    done | sed 's/; $//'
}

# The devices the driver's modules serve: the GPUs, nvidiactl, UVM, modeset, MIG and IMEX capabilities
driver_holders() { gpu_holders /dev/nvidia* /dev/nvidia-caps/* /dev/nvidia-caps-imex-channels/*; }

# The IMEX channels a multi-node job's processes import each other's memory through: gpu_holders'
# lines; "unknown" where a channel exists and fuser does not
imex_holders() {
    set -- /dev/nvidia-caps-imex-channels/channel*
    [ -c "$1" ] || return 0
    if command -v fuser >/dev/null 2>&1; then gpu_holders "$@"; else echo unknown; fi
}
