"""Test hosts: N hosts on this machine, each a Linux network namespace with its own address on one link and
its own loopback, and its own /tmp (a mount namespace), for tests and benchmarks of runs across hosts.

    with TestHosts(["h0", "h1", "h2"]) as hosts:
        hosts.address("h0")                      # 198.18.74.1
        hosts.start("h0", ["redis-server", ...])   # a process on h0, stopped when the hosts go
        hosts.link_down("h1") / hosts.link_up("h1")

The hosts share one bridge inside a namespace of its own, so nothing they send can leave it: the
addresses are in 198.18.0.0/15, the range set aside for testing networks (RFC 2544), and only these
hosts hold them. Everything made here (namespaces, links, processes, folders) is removed on exit, when a
test fails or is interrupted too; a harness left behind by a killed test run is removed by the next one.
Needs root (CI runs as root); `why_not_here` says why elsewhere. The suite's runs across hosts and
`ddq bench chaos` are made on them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ddq.processes import alive

PREFIX = "ddqt"  # every namespace and folder this harness makes starts so, with its creator's pid
SUBNET = "198.18.74"
BASE = Path("/var/tmp")  # outside /tmp, which each host replaces with its own
# The software every host runs, at the same path on each, as a cluster's shared install would be: ddq's
# source (a checkout's src/, or site-packages), this environment and its Python. Under /tmp (a clone made
# there) they are mounted back into each host's own /tmp; nothing of a run is ever written there.
SOFTWARE = [Path(__file__).resolve().parents[2], Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()]


def why_not_here() -> str | None:
    """Why test hosts cannot be made on this machine, or None."""
    if os.geteuid() != 0:
        return "test hosts need root (network and mount namespaces); CI runs as root"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "test hosts need the ip and unshare commands (iproute2, util-linux)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def remove_stale() -> None:
    """Namespaces and folders of harnesses whose test run is gone (killed before it could clean up)."""
    listed = _ip("netns", "list", check=False).stdout.split()
    for name in listed:
        parts = name.split("-")
        if parts[0] == PREFIX and len(parts) >= 3 and parts[1].isdigit() and not alive(int(parts[1])):
            _kill_all_in(name)
            _ip("netns", "del", name, check=False)
    for folder in BASE.glob(f"{PREFIX}-*"):
        pid = folder.name.split("-")[1]
        if pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _kill_all_in(namespace: str) -> None:
    """SIGKILL every process in a network namespace (what a host crash leaves: nothing)."""
    for pid in _ip("netns", "pids", namespace, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


class TestHosts:
    """Hosts named `names`, with addresses SUBNET.1, .2, ... in that order."""

    __test__ = False  # not a test class, despite its name

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self.tag = f"{PREFIX}-{os.getpid()}-{time.monotonic_ns() % 10**6}"
        self.hub = f"{self.tag}-hub"
        self.folder = BASE / self.tag
        self.processes: list[subprocess.Popen] = []
        self.started_on: dict[int, str] = {}  # pid of each process started -> its host

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def address(self, host: str) -> str:
        return f"{SUBNET}.{self.names.index(host) + 1}"

    def tmp(self, host: str) -> Path:
        """What `host` sees as /tmp, seen from outside the hosts."""
        return self.folder / host / "tmp"

    def __enter__(self) -> TestHosts:
        remove_stale()
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _make(self) -> None:
        _ip("netns", "add", self.hub)
        self._in(self.hub, "link", "add", "br0", "type", "bridge")
        self._in(self.hub, "link", "set", "br0", "up")
        for index, host in enumerate(self.names):
            namespace, port = self.namespace(host), f"p{index}"
            _ip("netns", "add", namespace)
            _ip("link", "add", "eth0", "netns", namespace, "type", "veth", "peer", "name", port, "netns", self.hub)
            self._in(self.hub, "link", "set", port, "master", "br0", "up")
            self._in(namespace, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            self._in(namespace, "link", "set", "eth0", "up")
            self._in(namespace, "link", "set", "lo", "up")
            self.tmp(host).mkdir(parents=True, exist_ok=True)
            self.tmp(host).chmod(0o1777)

    @staticmethod
    def _in(namespace: str, *args: str) -> None:
        _ip("-n", namespace, *args)

    def start(self, host: str, command: Sequence[str], log: Path | None = None,
              env: dict[str, str] | None = None, stdin_text: str | None = None,
              core: int | None = None) -> subprocess.Popen:
        """`command` on `host`: in its network namespace, with its /tmp; stopped when the hosts go. `log`
        is a path as seen from outside the hosts; `stdin_text` is written to its standard input (settings
        that must not be on a command line); `core` holds it, and all it starts, to that CPU core (a host of
        one core)."""
        wrapper = ["ip", "netns", "exec", self.namespace(host), "unshare", "--mount", "--propagation", "private",
                   "sh", "-c", self._own_tmp(host) + ' && exec "$@"', "sh", *command]
        output = open(log, "ab") if log else subprocess.DEVNULL
        try:
            process = subprocess.Popen(wrapper, stdin=subprocess.DEVNULL if stdin_text is None else subprocess.PIPE,
                                       stdout=output, stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})),
                                       start_new_session=True,
                                       preexec_fn=None if core is None else lambda: os.sched_setaffinity(0, {core}))
        finally:
            if log:
                output.close()  # type: ignore[union-attr]
        if stdin_text is not None and process.stdin is not None:
            with process.stdin:
                process.stdin.write(stdin_text.encode())
        self.processes.append(process)
        self.started_on[process.pid] = host
        return process

    def _own_tmp(self, host: str) -> str:
        """Shell commands, run in a new mount namespace, that give it `host`'s /tmp, with the software
        found under /tmp mounted back at the same paths."""
        steps = []
        for path in SOFTWARE:
            if path.is_relative_to("/tmp") and path != Path("/tmp"):
                inside = self.tmp(host) / path.relative_to("/tmp")
                inside.mkdir(parents=True, exist_ok=True)
                steps.append(f"mount --bind {shlex.quote(str(path))} {shlex.quote(str(inside))}")
        steps.append(f"mount --rbind {shlex.quote(str(self.tmp(host)))} /tmp")
        return " && ".join(steps)

    def run(self, host: str, command: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess:
        """`command` on `host`, to its end."""
        wrapper = ["ip", "netns", "exec", self.namespace(host), "unshare", "--mount", "--propagation", "private",
                   "sh", "-c", self._own_tmp(host) + ' && exec "$@"', "sh", *command]
        return subprocess.run(wrapper, capture_output=True, text=True, timeout=timeout)

    def pids(self, host: str) -> list[int]:
        return [int(pid) for pid in _ip("netns", "pids", self.namespace(host), check=False).stdout.split()]

    def crash(self, host: str, timeout: float = 10) -> None:
        """Every process of `host` killed at once, as when a machine dies; returns once none is left."""
        _kill_all_in(self.namespace(host))
        for process in self.processes:  # reaped, so that none lingers as a zombie of this test
            if self.started_on.get(process.pid) == host:
                process.wait(timeout)
        deadline = time.monotonic() + timeout
        while self.pids(host):
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes of {host} outlived SIGKILL: {self.pids(host)}")
            _kill_all_in(self.namespace(host))
            time.sleep(0.05)

    def link_bytes(self, host: str) -> tuple[int, int]:
        """(bytes received, bytes sent) on `host`'s link so far."""
        shown = json.loads(_ip("-n", self.namespace(host), "-s", "-j", "link", "show", "eth0").stdout)
        return shown[0]["stats64"]["rx"]["bytes"], shown[0]["stats64"]["tx"]["bytes"]

    def limit_link(self, host: str, mbit: float) -> None:
        """Holds `host`'s link to `mbit` Mbit/s each way (tbf on its end and on the hub's)."""
        port = f"p{self.names.index(host)}"
        for namespace, device in ((self.namespace(host), "eth0"), (self.hub, port)):
            _ip("netns", "exec", namespace, "tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate",
                f"{mbit}mbit", "burst", "64kb", "latency", "100ms")

    def link_down(self, host: str) -> None:
        self._in(self.namespace(host), "link", "set", "eth0", "down")

    def link_up(self, host: str) -> None:
        self._in(self.namespace(host), "link", "set", "eth0", "up")

    def close(self) -> None:
        """Kills what was started (its process groups: nothing of a test host's is worth a graceful stop),
        then removes the namespaces, links and folders. Each host's processes are gone when it returns: a
        SIGKILLed JVM took a moment to exit, and a fresh clone's suite once found two left as the bench ended."""
        for host in self.names:
            # what outlives SIGKILL for 10 s is left to the next harness, which removes what a run left behind
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.crash(host)
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(5)
        for namespace in [*map(self.namespace, self.names), self.hub]:
            _ip("netns", "del", namespace, check=False)  # its veth end goes with it, and so the pair
        shutil.rmtree(self.folder, ignore_errors=True)


def deps_only_python(folder: Path) -> Path:
    """A Python environment with ddq's dependencies and without ddq: a venv whose one .pth file adds this
    environment's site-packages. Python reads .pth files only in site folders, so this environment's
    own (the one installing ddq) is not read there, and `import ddq` fails."""
    import sysconfig

    venv = folder / "deps-only"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        purelib = sysconfig.get_paths()["purelib"]
        target = next((venv / "lib").glob("python*/site-packages"))
        (target / "ddq-dependencies.pth").write_text(purelib + "\n")
    return venv / "bin" / "python"


def link_or_copy(source: Path, destination: Path) -> None:
    """A hard link (instant, and no space: torch alone is 750 MB), or a copy across file systems."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def executor_environment(folder: Path) -> Path:
    """A virtual environment that holds ddq's dependencies as installed here (hard links to their files),
    and neither ddq nor pyspark (Spark hands executors its own): what a user makes for executors with `pip
    install`, made from the files already here instead of a download. venv-pack can pack it (`ddq package
    --env`)."""
    venv = folder / "executor-env"
    if (venv / "bin" / "python").exists():
        return venv
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    link_distributions(next((venv / "lib").glob("python*/site-packages")), ["ddq"], {"pyspark", "py4j", "ddq"})
    return venv


def link_distributions(site: Path, roots: list[str], leave_out: set[str]) -> None:
    """Puts the distributions `roots` need, as installed here, into the site-packages folder `site`: the
    files of each (hard links), and of what each requires without extras, but nothing of `leave_out`."""
    from importlib import metadata

    from packaging.requirements import Requirement

    wanted, seen = [Requirement(root) for root in roots], set()
    while wanted:
        requirement = wanted.pop()
        name = requirement.name.lower().replace("_", "-")
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        dist = metadata.distribution(requirement.name)
        if name not in leave_out:
            for file in dist.files or []:
                source = Path(str(file.locate()))
                if ".." not in file.parts and source.is_file():  # scripts in bin/ are not needed
                    (site / file).parent.mkdir(parents=True, exist_ok=True)
                    link_or_copy(source, site / file)
        wanted += [Requirement(text) for text in dist.requires or []]
