"""The run's private Redis serving other hosts: TLS with a CA made for the run, an ACL user with a password
made for the run, and neither the password on a command line, in a file or in a Redis value. A wrong
password, an untrusted certificate, an unreachable address or a foreign --listen address each give one
clear line before anything starts. The address is 127.0.0.2: beyond the default, still this machine."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from conftest import command_lines_holding, run_ddq, summary_of
from ddq.preflight import SettingError, check_listen, check_redis
from ddq.transport.redis_client import connect
from ddq.transport.redis_server import EmbeddedRedis
from ddq.transport.resp import RespConnection
from test_downpour import processes_mentioning

ADDRESS = "127.0.0.2"
needs_tls = pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v redis-server"], capture_output=True).returncode,
                               reason="no redis-server with TLS on PATH: make test installs Debian's")


def password_of(url: str) -> str:
    return re.search(r"password=([^&]+)", url).group(1)


@needs_tls
def test_a_listening_redis_speaks_tls_to_those_who_trust_the_run_ca_and_know_the_password():
    with EmbeddedRedis(listen=ADDRESS, run="secure") as server:
        secret = password_of(server.url)
        assert server.remote_url.startswith(f"rediss://ddq:{secret}@{ADDRESS}:")
        assert connect(server.remote_url).ping() and connect(server.url).ping()
        assert RespConnection(server.remote_url).command("PING") == "PONG"
        assert secret.encode() not in Path(f"/proc/{server.pid}/cmdline").read_bytes()
        files = [path for path in server.folder.rglob("*") if path.is_file()] + [server.log_path]
        assert files and not [path for path in files if secret.encode() in path.read_bytes()]

        without_ca = server.remote_url.split("?")[0]
        wrong_password = server.remote_url.replace(secret, "not-the-password")
        port = int(without_ca.rsplit(":", 1)[1].split("/")[0])
        for url, said in ((wrong_password, "refused the user name or password"),
                          (without_ca, "TLS certificate is not one this URL trusts"),
                          (f"redis://{ADDRESS}:{port}/0", "no Redis answers there"),  # TLS only: plain TCP fails
                          (f"redis://{ADDRESS}:1/0", "no Redis answers there")):
            with pytest.raises(SettingError, match=said) as error:
                check_redis(url, "--redis-url")
            assert secret not in str(error.value) and "\n" not in str(error.value)
        with pytest.raises(redis.AuthenticationError):  # the default user is off
            connect(f"unix://{server.socket_path}?db=0").ping()


def test_listen_must_be_an_address_of_this_host():
    check_listen(ADDRESS)
    with pytest.raises(SettingError, match="--listen 192.0.2.1: not an address of this host"):
        check_listen("192.0.2.1")  # TEST-NET-1: documentation only, never this host's
    result = run_ddq("train", "--env", "CartPole-v1", "--listen", "192.0.2.1", "--total-steps", "100")
    assert result.returncode != 0 and "--listen 192.0.2.1: not an address of this host" in result.stderr
    assert "Traceback" not in result.stderr


@needs_tls
@pytest.mark.slow
def test_a_run_listening_beyond_loopback_trains_over_tls_and_keeps_its_password_secret(tmp_path):
    """Downpour with --listen: the workers reach Redis over TLS at the listen address; the password reaches
    the processes ddq starts through their environment only."""
    run_dir = tmp_path / "run"
    log = tmp_path / "train.log"
    process = subprocess.Popen([sys.executable, "-m", "ddq", "train", "--mode", "downpour", "--workers", "2",
                                "--env", "CartPole-v1", "--listen", ADDRESS, "--total-steps", "3000",
                                "--eval-every", "3000", "--eval-episodes", "2", "--no-progress", "--no-celery",
                                "--no-dashboard", "--run-dir", str(run_dir)],
                               stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    try:
        secret = None
        deadline = time.monotonic() + 120
        while secret is None:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            for pid in processes_mentioning("param-server"):
                with contextlib.suppress(OSError):
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    urls = [line.split(b"=", 1)[1].decode() for line in environ if line.startswith(b"DDQ_REDIS_URL=")]
                    secret = password_of(urls[0]) if urls and str(run_dir) in Path(f"/proc/{pid}/cmdline").read_text() else None
            time.sleep(0.2)
        assert command_lines_holding(secret) == []
        out, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, log.read_text()[-3000:]
    assert summary_of(run_dir)["env_steps"] >= 3000 and f"serves other hosts at {ADDRESS}" in log.read_text()
    written = [path for path in run_dir.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]
    assert written == [] and secret not in log.read_text() + out
    assert quote(secret) == secret  # a URL-safe password: what the checks above looked for is what was sent
