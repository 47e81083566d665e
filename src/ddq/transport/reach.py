"""Whether a Redis answers at a URL as ddq's clients connect to it, and if not, why: the one rule from which
every check of a Redis URL (ddq train's, a hand-started shard's or Barista's, a shard host's) phrases its line.

Two connections, as a run makes them: redis-py's PING (the driver, Celery, the dashboard), then ddq's own
connection with AUTH and SELECT as the URL asks (the shards' and workers' hot paths). redis-py lets a password
pass that a server with none refuses ("AUTH called without any password configured"), and a run's shards
then exited once it had started.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ddq.transport.redis_client import StoreAuthenticationError, StoreError, StoreRefused, ping
from ddq.transport.resp import RespError, meet, refused_password


class Unanswered(enum.Enum):
    """Why no Redis answered as a run connects."""

    PASSWORD = enum.auto()  # it refused the URL's user name or password
    CONNECTION = enum.auto()  # it answered with another error (a database it does not have, an ACL's refusal)
    CERTIFICATE = enum.auto()  # it gave a TLS certificate the URL does not trust
    SILENCE = enum.auto()  # nothing listens, the path to it is cut, or what answers is not Redis
    MALFORMED = enum.auto()  # the URL is not one a Redis client can use (its scheme, port, database, TLS query)


@dataclass(frozen=True)
class Refusal:
    """Why no Redis answered at a URL, and what the attempt raised."""

    why: Unanswered
    error: BaseException

    @property
    def detail(self) -> str:
        """The first line of the error (no secret in it: the errors name no password)."""
        text = str(self.error)
        return text.splitlines()[0] if text else type(self.error).__name__


def refusal(url: str, timeout_s: float) -> Refusal | None:
    """None when a Redis answers at `url` within `timeout_s` as a run's processes connect (no restart's
    outage is waited out); else why not."""
    try:
        ping(url, timeout_s)  # an answer now, not after a restart's grace
        meet(url, timeout_s)  # and as the run's shards and workers connect
    except (RespError, StoreAuthenticationError, StoreRefused) as error:  # it answered, and said no
        password = isinstance(error, StoreAuthenticationError) or refused_password(error)
        return Refusal(Unanswered.PASSWORD if password else Unanswered.CONNECTION, error)
    except ValueError as error:  # the clients parse the URL before they connect: nothing was tried
        return Refusal(Unanswered.MALFORMED, error)
    except (StoreError, OSError) as error:
        untrusted = "CERTIFICATE_VERIFY_FAILED" in str(error) or "certificate verify failed" in str(error)
        return Refusal(Unanswered.CERTIFICATE if untrusted else Unanswered.SILENCE, error)
    return None
