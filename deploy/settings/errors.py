"""
How an invalid setting stops a run: ``SettingsError``, one line naming the key, the value and what
is allowed, and the value as that line shows it (credentials in a URL masked).
"""

from __future__ import annotations

import re
from typing import Any

from pyinfra.api.exceptions import PyinfraError
from pyinfra_cli.exceptions import CliError


class SettingsError(PyinfraError, CliError):  # type: ignore[misc]  # pyinfra_cli ships no types: CliError is Any
    """
    An invalid setting: raised before any host is changed. Also pyinfra CLI's own error type, so the
    CLI shows it as ``--> pyinfra error: MESSAGE``: its wrapper for other errors names the file and
    line they were raised at, which would point into this file rather than at the value.
    """


# scheme://user:password@ in a value an error line shows: the line goes to logs and terminals
URL_USER_INFO = re.compile(r"(?<=://)[^/@\s]*@")


def shown(value: Any) -> str:
    """``value`` as an error line shows it: text quoted, a URL's user:password@ masked."""
    return URL_USER_INFO.sub("***@", repr(value) if isinstance(value, str) else str(value))
