"""Transport and identity against real master processes: TLS and mutual TLS, the three roles' tokens (from
files), and the refusal to listen on a non-loopback address without TLS and a token."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from harness import EXAMPLES, Cluster, RedisServer, free_port, stop_process, wait_for
from sparkyard import Client, PermissionDenied, Unavailable
from sparkyard.certs import DevCerts, make_dev_certs
from sparkyard.client import first_run_id
from sparkyard.options import build_spec
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"
ROLES = ("admin", "worker", "viewer")


@dataclass
class Secured:
    """A master serving mutual TLS, its three tokens given as files."""

    cluster: Cluster
    certs: DevCerts
    token_files: dict[str, Path]

    def tls(self) -> dict[str, str]:
        return {"tls_ca": str(self.certs.ca), "tls_cert": str(self.certs.client_cert),
                "tls_key": str(self.certs.client_key)}

    def client(self, role: str, **tls: str) -> Client:
        return Client(self.cluster.address, token_file=str(self.token_files[role]), **(tls or self.tls()))

    def cli(self, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SPARKYARD_")}
        return subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", self.cluster.address, *args],
                              capture_output=True, text=True, env={**clean, **env}, timeout=60)


def token_files(directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for role in ROLES:
        path = files[role] = directory / f"{role}.token"
        path.write_text(f"{role}-{os.urandom(16).hex()}\n")
        path.chmod(0o600)
    return files


def secured_master_args(certs: DevCerts, files: dict[str, Path]) -> tuple[str, ...]:
    return ("--token-file", str(files["admin"]), "--worker-token-file", str(files["worker"]),
            "--viewer-token-file", str(files["viewer"]), "--tls-cert", str(certs.server_cert),
            "--tls-key", str(certs.server_key), "--tls-client-ca", str(certs.ca))


@pytest.fixture(scope="module")
def secured(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory,
            dev_certs: DevCerts) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("secured")
    files = token_files(root / "tokens")
    tls = {"tls_ca": str(dev_certs.ca), "tls_cert": str(dev_certs.client_cert), "tls_key": str(dev_certs.client_key)}
    cluster = Cluster(redis_server.url, root, namespace=f"sec{os.getpid()}", client_settings=tls)
    try:
        cluster.start_master(*secured_master_args(dev_certs, files))
        yield Secured(cluster, dev_certs, files)
    finally:
        cluster.stop()


def _parked_job(client: Client) -> pb.Job:
    """A job that does not fire while the test runs (no worker is needed)."""
    return client.submit_spec(build_spec(f"{TASKS}:count", delay="1h")).job


# ------------------------------------------------------------------------------------------------ TLS


def test_a_client_with_the_ca_and_a_certificate_is_served_over_mutual_tls(secured: Secured) -> None:
    with secured.client("admin") as client:
        assert client.status().master_id


def test_a_plaintext_client_is_refused_by_a_tls_master(secured: Secured) -> None:
    with secured.client("admin", tls_ca="") as client, pytest.raises(Unavailable, match="give --tls-ca"):
        client.status()


def test_mutual_tls_refuses_a_client_without_a_certificate(secured: Secured) -> None:
    with secured.client("admin", tls_ca=str(secured.certs.ca)) as client:
        with pytest.raises(Unavailable, match="requires client certificates, give --tls-cert and --tls-key"):
            client.status()


def test_a_master_whose_certificate_another_ca_signed_is_not_trusted(secured: Secured, tmp_path: Path) -> None:
    other = make_dev_certs(tmp_path / "other")
    tls = {"tls_ca": str(other.ca), "tls_cert": str(other.client_cert), "tls_key": str(other.client_key)}
    with secured.client("admin", **tls) as client, pytest.raises(Unavailable):
        client.status()


# ------------------------------------------------------------------------------------------------ roles


def test_admin_may_make_every_call(secured: Secured) -> None:
    with secured.client("admin") as client:
        job = _parked_job(client)  # HasBundle, UploadBundle, SubmitJob
        assert client.job(job.id).id == job.id
        assert job.id in {j.id for j in client.jobs()}
        assert client.pause(job.id).state == pb.JOB_PAUSED
        assert client.resume(job.id).state == pb.JOB_ACTIVE
        run = client.trigger(job.id)
        assert client.run(run.id).id == run.id
        assert run.id in {r.id for r in client.runs(job.id)}
        _, timed_out = client.wait(run.id, timeout=0.1)
        assert timed_out
        assert job.id in client.cancel(job.id)
        client.workers()
        client.status()


def test_the_viewer_token_reads_but_changes_nothing(secured: Secured) -> None:
    with secured.client("admin") as admin:
        job = _parked_job(admin)
    with secured.client("viewer") as viewer:
        assert viewer.job(job.id).id == job.id
        assert job.id in {j.id for j in viewer.jobs()}
        assert viewer.runs(job.id) == []
        viewer.workers()
        viewer.status()
        refused = {
            "SubmitJob": lambda: viewer.submit_spec(build_spec(f"{TASKS}:count", delay="1h", ship=False)),
            "Cancel": lambda: viewer.cancel(job.id),
            "PauseJob": lambda: viewer.pause(job.id),
            "ResumeJob": lambda: viewer.resume(job.id),
            "TriggerJob": lambda: viewer.trigger(job.id),
        }
        for method, call in refused.items():
            with pytest.raises(PermissionDenied) as denied:
                call()
            assert str(denied.value) == f"{method} needs the admin role; this token has the viewer role"
    with secured.client("admin") as admin:
        assert admin.job(job.id).state == pb.JOB_ACTIVE  # nothing the viewer tried took effect
        assert admin.runs(job.id) == []


def test_the_worker_token_cannot_submit_or_list_jobs(secured: Secured) -> None:
    with secured.client("worker") as worker:
        with pytest.raises(PermissionDenied, match="^ListJobs needs the admin or viewer role; this token has the "
                                                   "worker role$"):
            worker.jobs()
        with pytest.raises(PermissionDenied, match="^SubmitJob needs the admin role"):
            worker.submit_spec(build_spec(f"{TASKS}:count", delay="1h", ship=False))
        with pytest.raises(PermissionDenied, match="^GetStatus needs the admin or viewer role"):
            worker.status()


def test_the_cli_takes_a_token_file_and_tls_from_flags_or_the_environment(secured: Secured) -> None:
    env = {"SPARKYARD_TLS_CA": str(secured.certs.ca), "SPARKYARD_TLS_CERT": str(secured.certs.client_cert),
           "SPARKYARD_TLS_KEY": str(secured.certs.client_key)}
    listed = secured.cli("jobs", "--json", "--token-file", str(secured.token_files["viewer"]), env=env)
    assert listed.returncode == 0, listed.stderr
    flags = [f"--{name.replace('_', '-')}" if i % 2 == 0 else name for pair in secured.tls().items()
             for i, name in enumerate(pair)]
    cancel = secured.cli("cancel", "j19a8c2f3a1b2c3d4e5f65", "--token-file", str(secured.token_files["viewer"]), *flags,
                         env={"SPARKYARD_TOKEN_FILE": "/nonexistent"})
    assert cancel.returncode == 1
    assert cancel.stderr.strip() == "sparkyard cancel: Cancel needs the admin role; this token has the viewer role"
    secret = secured.token_files["viewer"].read_text().strip()
    missing = secured.cli("jobs", "--token-file", str(secured.token_files["viewer"]) + ".gone", env=env)
    assert missing.returncode == 2 and "token_file" in missing.stderr and "No such file" in missing.stderr
    assert secret not in cancel.stderr + missing.stderr


@pytest.mark.spark
def test_a_worker_with_the_worker_token_runs_tasks_over_mutual_tls_and_a_viewer_token_cannot_register(
        make_cluster: object, dev_certs: DevCerts, tmp_path: Path) -> None:
    files = token_files(tmp_path / "tokens")
    tls = {"tls_ca": str(dev_certs.ca), "tls_cert": str(dev_certs.client_cert), "tls_key": str(dev_certs.client_key)}
    cluster: Cluster = make_cluster(token=files["admin"].read_text().strip(), client_settings=tls)  # type: ignore[operator]
    cluster.start_master(*secured_master_args(dev_certs, files))
    flags = ("--tls-ca", tls["tls_ca"], "--tls-cert", tls["tls_cert"], "--tls-key", tls["tls_key"])
    metrics = f"127.0.0.1:{free_port()}"
    (tmp_path / "scrape").write_text("scr4pe\n")
    cluster.start_worker("w", slots=1, extra=(
        "--token-file", str(files["worker"]), *flags, "--metrics", metrics, "--metrics-tls-cert",
        str(dev_certs.server_cert), "--metrics-tls-key", str(dev_certs.server_key),
        "--metrics-token-file", str(tmp_path / "scrape")))
    viewer = cluster.start_worker("as-viewer", slots=1, runner="submit",
                                  extra=("--token-file", str(files["viewer"]), *flags))
    wait_for(lambda: "Connect needs the admin or worker role; this token has the viewer role" in viewer.log(), 60,
             "the worker with a viewer token to be refused")
    stop_process(viewer.process)
    cluster.wait_workers("w")
    client = cluster.client()
    assert {w.id for w in client.workers()} == {"w"}
    run, _ = client.wait(first_run_id(client.submit(f"{TASKS}:count")), timeout=120)  # the bundle: FetchBundle
    assert run.state == pb.RUN_SUCCEEDED, run
    # The worker's /metrics: over HTTPS, read with the metrics token (or the worker's), refused without one.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),  # loopback only, whatever the env says
                                         urllib.request.HTTPSHandler(
                                             context=ssl.create_default_context(cafile=str(dev_certs.ca))))

    def scrape(token: str) -> tuple[int, str]:
        request = urllib.request.Request(f"https://{metrics}/metrics",
                                         headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with opener.open(request, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    status, text = scrape("scr4pe")
    assert status == 200 and "sparkyard_worker_slots" in text
    assert scrape(files["worker"].read_text().strip())[0] == 200
    assert scrape("")[0] == 401 and scrape("wrong")[0] == 401
    with pytest.raises(OSError):  # plain HTTP is not served (URLError, or the connection dropped)
        opener.open(f"http://{metrics}/metrics", timeout=10)


# ------------------------------------------------------------------------------------------------ exposure


@pytest.mark.parametrize("given, lacking", [
    (("--token", "t0ken"), "without TLS (--tls-cert, --tls-key):"),
    (("--tls-cert", "CERT", "--tls-key", "KEY"), "without a token (--token or --token-file):"),
    ((), "without TLS (--tls-cert, --tls-key) and a token (--token or --token-file):"),
])
def test_a_master_refuses_a_non_loopback_address_without_tls_and_a_token(
        given: tuple[str, ...], lacking: str, dev_certs: DevCerts, tmp_path: Path) -> None:
    args = [a.replace("CERT", str(dev_certs.server_cert)).replace("KEY", str(dev_certs.server_key)) for a in given]
    address = f"0.0.0.0:{free_port()}"
    done = subprocess.run([sys.executable, "-m", "sparkyard.master.main", "--listen", address,
                           "--data-dir", str(tmp_path), *args], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("SPARKYARD_")})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sparkyard-master: refusing to listen on {address} {lacking}")
    assert "--insecure" in lines[0]
    assert not (tmp_path / "redis").exists()  # refused before starting anything


def test_insecure_lets_a_master_listen_on_a_non_loopback_address_in_plaintext(make_cluster: object) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    # Port 0: the master binds a free one itself (a port picked here beforehand was once taken by a Spark
    # JVM of a test beside this one before the master bound it).
    address = cluster.start_master("--listen", "0.0.0.0:0", "--insecure")
    assert address.startswith("0.0.0.0:") and not address.endswith(":0")
    assert cluster.client().status().master_id
