#!/bin/sh
# The unit's restart, watched: restart succeeds only when the unit is active within timeout
# seconds; otherwise why says what it is and what its journal shows.
# shellcheck disable=SC2154 # unit, timeout: assigned before this part
# shellcheck disable=SC2034 # why: read by the parts that follow
wait_active() {
    deadline=$(( $(date +%s) + timeout ))
    while :; do
        # Active twice a second apart: a daemon that dies right after start is not up.
        if systemctl is-active --quiet "$unit" && sleep 1 && systemctl is-active --quiet "$unit"; then
            return 0
        fi
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 1
    done
}
restart() {
    restart_output=$(timeout "$timeout" systemctl restart "$unit" 2>&1)
    restart_status=$?
    # A failed or killed restart leaves the old daemon active: that is not a restart.
    [ "$restart_status" -eq 0 ] && wait_active && return 0
    state=$(systemctl is-active "$unit" 2>&1)
    journal=$(journalctl -u "$unit" -n 8 --no-pager -o cat 2>/dev/null)
    why="$unit is $state, not active, ${timeout} s after 'systemctl restart' (exit $restart_status) $restart_output
$journal"
    return 1
}
