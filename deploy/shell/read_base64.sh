#!/bin/sh
# read_base64 FILE: its first max_bytes bytes (given before it: node_text.MAX_FILE_BYTES + 1) as
# one base64 line: every byte survives pyinfra's connector, which takes command output as UTF-8,
# and a file too large to read costs one byte more than the bound to refuse.
# shellcheck disable=SC2154 # max_bytes: assigned before the function
read_base64() { head -c "$max_bytes" < "$1" | base64 -w0; }
