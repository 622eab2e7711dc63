#!/bin/sh
# The end of VerifyReadout's read (deploy/shell/verify_readout.sh), after the runtimes' parts: the
# systemd units they and the read named, the background lines.
# shellcheck disable=SC2154 # keys, units, _bg: assigned before the script
# One systemctl call for every unit read here (each call is a round trip to systemd): its blocks
# come in the order asked, each printed as "unit <name> <properties>" or as "<key> <ActiveState>".
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
