#!/bin/sh
# coreutils' sync fsyncs the files it is given (8.24+); an older one takes none and flushes all.
flush() {
    if sync --help 2>/dev/null | grep -q -e --file-system; then sync -- "$@"; else sync; fi
}
