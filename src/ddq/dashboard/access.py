"""Who may read the dashboard: the Host names it answers to, and beyond loopback a token made for the run.

A page on any site can make the user's browser send requests to a local server, and
with DNS rebinding read the answers: its own host name comes to resolve to 127.0.0.1.
The browser then names the attacker's host in the Host header, so the dashboard
answers only requests naming one of its own: on loopback 127.0.0.1, localhost or ::1.
Beyond loopback (`--host 0.0.0.0`) anyone who can reach the port could read the run,
so every request must also carry a token made when the dashboard starts
(`?token=` once, which sets a cookie, or an `X-DDQ-Token` header). The token is shown
once on the user's terminal and never written to a log, a file or a command line.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import sys
from dataclasses import dataclass, field
from typing import TextIO

COOKIE = "ddq_token"
HEADER = "X-DDQ-Token"
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a Host header, without its port: `[::1]:80` gives `::1`, `Example:80` gives `example`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


@dataclass
class Access:
    """The rule for one dashboard: the host it binds, and its token when that host is beyond loopback."""

    host: str
    token: str | None = None
    names: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def for_host(cls, host: str) -> Access:
        """Loopback: no token, Host one of the loopback names. Beyond it: a fresh token, and Host an address
        (the one the browser really connected to, which rebinding cannot forge) or a name of this host."""
        if is_loopback(host):
            return cls(host, None, LOOPBACK_NAMES | {host.lower()})
        names = set(LOOPBACK_NAMES | {host.lower(), socket.gethostname().lower(), socket.getfqdn().lower()})
        return cls(host, secrets.token_urlsafe(32), frozenset(names))

    def refusal(self, host_header: str, query_token: str | None, cookie: str | None,
                header: str | None) -> tuple[int, str] | None:
        """Why a request is refused (an HTTP status and one line), or None when it may be answered."""
        name = host_name(host_header)
        if name not in self.names and not (self.token is not None and _is_address(name)):
            return 403, (f"Host {host_header!r} is not a name of this dashboard ({', '.join(sorted(self.names))}"
                         + (", or an IP address" if self.token else "") + "); open it by one of those")
        if self.token is None:
            return None
        given = query_token or header or cookie or ""
        if not secrets.compare_digest(given.encode(), self.token.encode()):
            return 401, ("this dashboard listens beyond loopback and needs the token `ddq dashboard` printed when "
                         f"it started: open the URL it showed (?token=...) or send the {HEADER} header")
        return None


def token_terminal(access: Access) -> TextIO | None:
    """Where to show the token once: the user's terminal (stderr if it is one, else /dev/tty), never a file
    or pipe that a log would keep. Raises ValueError when the dashboard needs a token and there is none."""
    if access.token is None:
        return None
    if sys.stderr.isatty():
        return sys.stderr
    try:
        return open("/dev/tty", "w")  # kept open: the line is written once the server has bound its port
    except OSError:
        raise ValueError(f"--host {access.host} reaches beyond this host, so the dashboard asks for a token "
                         "shown once on your terminal, and this process has none (stderr is not one, nor "
                         "/dev/tty): run it from a terminal, or keep the default --host 127.0.0.1") from None
