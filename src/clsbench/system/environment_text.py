"""Lines of ``clsbench env`` about this user's set-up rather than the machine, which no result file records.

Today that is where the history index is: by default one SQLite file in the user's data directory that every
checkout of clsbench on the machine shares, so ``clsbench history`` in a fresh checkout lists runs made from
others. A location may be a database URL with a password in it; the line shows it redacted
(``postgresql://user:***@host/db``), never the password.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["SECRET_MASK", "history_index_line", "redact_url"]

#: What stands where a secret was.
SECRET_MASK = "***"
#: A URL's scheme; a ``Path`` made of a URL keeps one slash after it, so one or two count.
_SCHEME = r"^[A-Za-z][A-Za-z0-9+.-]*:/{1,2}"
#: The user information of a URL: ``scheme://user:password@`` (up to the last ``@``: a password may hold one).
_URL_PASSWORD = re.compile(rf"({_SCHEME}[^/@:?#]*):[^/?#]*@")
#: Query parameters that carry a secret in a database URL (libpq accepts ``?password=`` and ``?sslpassword=``).
_SECRET_QUERY = re.compile(r"(?i)([?&](?:ssl)?password|[?&]passwd|[?&]token|[?&]secret)=[^&#]*")


def redact_url(location: str | Path) -> str:
    """``location`` as text with any password in it replaced by :data:`SECRET_MASK`; a plain path is unchanged."""
    text = str(location)
    if not re.match(_SCHEME, text):
        return text
    return _SECRET_QUERY.sub(rf"\1={SECRET_MASK}", _URL_PASSWORD.sub(rf"\1:{SECRET_MASK}@", text))


def history_index_line(location: str | Path, env_var: str, *, from_env: bool) -> str:
    """The value of ``clsbench env``'s ``history index`` line: where the index is and why it is there.

    Args:
        location: the index in use (a path or a database URL), as ``clsbench.api.history_index_path`` gives it.
        env_var: the environment variable that names another index.
        from_env: whether that variable chose ``location`` (else it is the default location).
    """
    shown = redact_url(location)
    if from_env:
        return f"{shown} (from ${env_var}; unset it for the default, shared by every checkout of this user)"
    return f"{shown} (shared by every checkout of this user; --db / ${env_var} for another)"
