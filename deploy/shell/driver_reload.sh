#!/bin/sh
# The driver's reload without a reboot, decided and done in this one command (deploy/operations/
# driver_reload.py): no pod can start between the read of who holds /dev/nvidia* and the unload.
# Given before it: modules (the unload order: each one's users first), services (the driver's own),
# reboot_status; gpu_holders.sh before it. Reads the holders: any process but the services' own
# (gpu_holders' UNIT) means "reboot required: ..." on stdout and exit $reboot_status, nothing
# stopped. Else stops the active services, unloads the loaded modules, loads them in the reverse
# order and starts the services again. On any failure every service it stopped is started again
# (and every module it unloaded loaded again) and its last line, on stderr, names the holder or the
# module: "driver reload failed: ...", exit 1.
# shellcheck disable=SC2154 # modules, services, reboot_status: assigned before the script

others() { driver_holders | awk '$3 == "-"'; }

if ! command -v fuser >/dev/null 2>&1; then
    echo "reboot required: fuser (psmisc) is not installed, so who holds /dev/nvidia* is unknown; install psmisc for a reload without a reboot"
    exit "$reboot_status"
fi
loaded=""
for module in $modules; do [ -d "/sys/module/$module" ] && loaded="$loaded $module"; done
if [ -z "$loaded" ]; then
    echo "no nvidia module is loaded: nothing to reload"
    exit 0
fi
held=$(others)
if [ -n "$held" ]; then
    echo "reboot required: $(printf '%s\n' "$held" | gh_named): stop it (or drain the node) and rerun, or reboot"
    exit "$reboot_status"
fi

stopped=""   # stopped and not started again yet, the last stopped first
unloaded=""  # unloaded and not loaded again yet, the last unloaded first
failed() {
    again="" not_again=""
    for module in $unloaded; do
        if modprobe "$module" >/dev/null 2>&1; then again="$again $module"; else not_again="$not_again $module"; fi
    done
    [ -z "$again" ] || again="; loaded again:$again"
    [ -z "$not_again" ] || again="$again; could not load again:$not_again (reboot)"
    started="" not_started=""
    for unit in $stopped; do
        if systemctl start "$unit" >/dev/null 2>&1; then started="$started $unit"; else not_started="$not_started $unit"; fi
    done
    [ -z "$started" ] || again="$again; started again:$started"
    [ -z "$not_started" ] || again="$again; could not start again:$not_started"
    printf 'driver reload failed: %s%s\n' "$1" "$again" | LC_ALL=C tr -c '[:print:]\n' '?' >&2
    exit 1
}
said() { printf '%s' "$1" | sed -n '$p'; }  # a command's last line

for unit in $services; do
    [ "$(systemctl is-active "$unit" 2>/dev/null)" = active ] || continue
    out=$(systemctl stop "$unit" 2>&1) || { stopped="$unit $stopped"; failed "systemctl stop $unit: $(said "$out")"; }
    stopped="$unit $stopped"
done
# A process that started since the read, or a service's process that outlived its stop
held=$(driver_holders)
[ -z "$held" ] || failed "$(printf '%s\n' "$held" | gh_named) after the driver's services stopped"
for module in $loaded; do
    out=$(modprobe -r "$module" 2>&1) || {
        held=$(driver_holders)
        failed "modprobe -r $module: $(said "$out")${held:+ ($(printf '%s\n' "$held" | gh_named))}"
    }
    unloaded="$module $unloaded"
done
for module in $unloaded; do
    out=$(modprobe "$module" 2>&1) || failed "modprobe $module: $(said "$out")"
    unloaded=${unloaded#"$module "}
done
for unit in $stopped; do
    out=$(systemctl start "$unit" 2>&1) || failed "systemctl start $unit: $(said "$out")"
    stopped=${stopped#"$unit "}
done
echo "nothing else held /dev/nvidia*: reloaded without a reboot:$loaded"
