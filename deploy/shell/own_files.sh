#!/bin/sh
# Before gpu-node kept records (0.1.0), its own files are known by their first line: the first
# bytes of each of the positional parameters that is a regular file (deploy/facts/records.py).
for own in "$@"; do
  [ -f "$own" ] && [ ! -L "$own" ] && echo "own $(printf %s "$own" | base64 -w0) $(head -c 120 "$own" | base64 -w0)"
done
true
