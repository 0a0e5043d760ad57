"""The headers ``serve --target`` sends with every call to a Triton server (its access token, usually), read so that
a secret never has to sit on a command line, where other users of the machine can read it with ``ps``.

A header is given as ``NAME: VALUE``, and its value may name where the secret is instead of holding it:

- ``NAME: env:VAR``: the value of the environment variable ``VAR``;
- ``NAME: @PATH``: the contents of the file ``PATH`` (``~`` expanded; surrounding whitespace and the final newline
  dropped), e.g. a file only its owner can read;
- anything else is the value itself (on the command line: visible to ``ps``; :func:`literal_header_names` says
  which headers were given so, for a warning).

A header's value is sent and nowhere else: the result file, the logs and every printed line carry its name only,
and the errors here name the variable or the file, never what they hold.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from clsbench.errors import InvalidInputError

__all__ = ["ENV_PREFIX", "FILE_PREFIX", "literal_header_names", "resolve_headers"]

#: A value ``env:VAR`` is read from the environment variable ``VAR``.
ENV_PREFIX = "env:"
#: A value ``@PATH`` is read from the file ``PATH``.
FILE_PREFIX = "@"
#: The largest header file read: an access token is tens of bytes; a larger file is the wrong file.
MAX_FILE_BYTES = 64 * 1024
_FIX = "e.g. --target-header 'triton-access-token: env:TRITON_TOKEN' or 'triton-access-token: @~/.triton-token'"


def _from_env(name: str, variable: str, environ: Mapping[str, str]) -> str:
    if not variable:
        raise InvalidInputError(f"--target-header {name}: 'env:' names no variable", _FIX)
    value = environ.get(variable)
    if value is None:
        raise InvalidInputError(f"--target-header {name}: the environment variable {variable} is not set",
                                f"export {variable} first, or read the value from a file: '{name}: @PATH'")
    if not value.strip():
        raise InvalidInputError(f"--target-header {name}: the environment variable {variable} is empty",
                                f"set {variable} to the header's value")
    return value.strip()


def _from_file(name: str, where: str) -> str:
    if not where:
        raise InvalidInputError(f"--target-header {name}: '@' names no file", _FIX)
    path = Path(where).expanduser()
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InvalidInputError(f"--target-header {name}: {path} is over {MAX_FILE_BYTES // 1024} KiB, not a "
                                    "header value", "name the file that holds only the value")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise InvalidInputError(f"--target-header {name}: cannot read {path}: {reason}",
                                "name a readable file that holds the header's value") from None
    value = text.strip()
    if not value:
        raise InvalidInputError(f"--target-header {name}: {path} is empty", "write the header's value into it")
    if "\n" in value or "\r" in value:
        raise InvalidInputError(f"--target-header {name}: {path} holds more than one line",
                                "a header's value is one line: keep only the value in the file")
    return value


def resolve_headers(headers: Mapping[str, str] | Sequence[tuple[str, str]] | None,
                    environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The headers to send: each value as given, or read from the variable (``env:VAR``) or file (``@PATH``) it
    names.

    Raises:
        InvalidInputError: a variable that is not set or is empty, a file that cannot be read, is empty or holds
            more than one line (the message names the header, and the variable or file, never a value).
    """
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, given in pairs:
        text = given.strip()
        if text.startswith(ENV_PREFIX):
            out[name] = _from_env(name, text[len(ENV_PREFIX):].strip(), env)
        elif text.startswith(FILE_PREFIX):
            out[name] = _from_file(name, text[len(FILE_PREFIX):].strip())
        else:
            out[name] = given
    return out


def literal_header_names(headers: Sequence[tuple[str, str]]) -> list[str]:
    """The names of the headers whose value was given itself (not ``env:VAR`` or ``@PATH``)."""
    return [name for name, value in headers
            if value.strip() and not value.strip().startswith((ENV_PREFIX, FILE_PREFIX))]
