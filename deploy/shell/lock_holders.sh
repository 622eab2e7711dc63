#!/bin/sh
# lock_holders LOCK...: "held <lock> <pid> <its command line>" for each of the given lock files
# another process holds (deploy/facts/recovery.py). /proc/locks names the holder of every
# fcntl/flock lock by inode: no fuser or lsof on a minimal node, and apt's locks are fcntl locks a
# shell cannot probe without taking them. One stat and one awk for every lock (awk drops repeats):
# the no-op reads this on each run.
lock_holders() {
    stat -c '%i %n' "$@" 2>/dev/null |
    awk 'NR == FNR { lock[$1] = $2; next } $2 != "->" { n = split($6, id, ":"); if (id[n] in lock) { held = lock[id[n]] " " $5; if (!(held in seen)) print held; seen[held] = 1 } }' - /proc/locks |
    while read -r lock pid; do
        echo "held $lock $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-100)"
    done
}
