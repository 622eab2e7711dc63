#!/bin/sh
# The daemon's check of the candidate: the positional parameters are its command, validator_what
# names it; daemon_output_filter (deploy/foundations/redact.py's) withholds what its complaint may quote.
# shellcheck disable=SC2154 # dest, candidate, validator_what: assigned before this part
if ! check_output=$("$@" 2>&1); then
    rm -f "$candidate"
    # The daemon's complaint can quote a credential from the file: withheld.
    fail "$dest was not changed: $validator_what rejected the new version:" \
        "$(printf '%s\n' "$check_output" | daemon_output_filter)"
fi
