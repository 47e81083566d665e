"""The run's Redis password on its way to Spark's executors: never inside a task, always from the executor's
own environment.

A Spark task is serialized on the driver and sent to an executor, over a channel that is plain text unless the
cluster turns on Spark's authentication and encryption; anyone who registers a worker with an open standalone
master receives tasks too. So the URL a task carries holds `$DDQ_REDIS_PASSWORD` where the password was, and
the executor puts back the password of its own environment: `DDQ_REDIS_PASSWORD`, or the file that
`DDQ_REDIS_PASSWORD_FILE` names. Spark sets that variable when it launches an executor (its launch
environment, `spark.executorEnv.*`), on channels it authenticates and encrypts; an operator may set either
variable on the executors' hosts instead.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

PASSWORD_VARIABLE = "DDQ_REDIS_PASSWORD"
PASSWORD_FILE_VARIABLE = "DDQ_REDIS_PASSWORD_FILE"
PLACEHOLDER = "$" + PASSWORD_VARIABLE  # what a task's URL holds instead of the password


class MissingPasswordError(RuntimeError):
    """An executor was given a URL whose password its host must supply, and its host has none."""


def split_password(url: str) -> tuple[str, str | None]:
    """(the URL with PLACEHOLDER where its password was, the password); (url, None) when it holds none. The
    password may be in the URL's user part (redis://user:password@host) or its query (unix sockets)."""
    parts = urlsplit(url)
    if parts.password is not None:
        userinfo, _, host = parts.netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        return urlunsplit(parts._replace(netloc=f"{user}:{PLACEHOLDER}@{host}")), unquote(parts.password)
    query = parse_qsl(parts.query, keep_blank_values=True)
    password = next((value for key, value in query if key == "password"), None)
    if password is None:
        return url, None
    query = [(key, PLACEHOLDER if key == "password" else value) for key, value in query]
    return url.split("?", 1)[0] + "?" + urlencode(query, safe="$"), password  # urlunsplit drops unix:'s //


def host_password() -> str | None:
    """This host's password for the run's Redis: $DDQ_REDIS_PASSWORD, else the file $DDQ_REDIS_PASSWORD_FILE
    names (its first line), else None."""
    password = os.environ.get(PASSWORD_VARIABLE)
    if password:
        return password
    path = os.environ.get(PASSWORD_FILE_VARIABLE)
    if not path:
        return None
    try:
        return Path(path).read_text().splitlines()[0].strip() or None
    except (OSError, IndexError) as error:
        raise MissingPasswordError(f"{PASSWORD_FILE_VARIABLE} names {path}, which this host ({socket.gethostname()}) "
                              f"cannot read a password from: {error}") from None


def executor_url(url: str) -> str:
    """`url` as a task received it, with this host's password where the driver left PLACEHOLDER."""
    if PLACEHOLDER not in url:
        return url
    password = host_password()
    if password is None:
        raise MissingPasswordError(
            f"the run's Redis wants a password, which Spark did not pass to this executor "
            f"({socket.gethostname()}): turn on spark.authenticate and spark.network.crypto.enabled, or set "
            f"{PASSWORD_VARIABLE} or {PASSWORD_FILE_VARIABLE} on the executors' hosts and the same for ddq train "
            f"(docs/cluster.md, \"Before the first run\")")
    return url.replace(PLACEHOLDER, quote(password, safe=""))


def run_password(redis_url: str | None, listen: str | None) -> str | None:
    """The password of a run's Redis: the one in the URL it was given, or, for a private Redis that serves
    other hosts (`listen`), this host's (`host_password`: the operator's, provisioned on the executors' hosts
    too) or one made now; None for a private Redis on this host only (a socket only this user may open)."""
    if redis_url:
        return split_password(redis_url)[1]
    if listen:
        return host_password() or secrets.token_urlsafe(32)
    return None
