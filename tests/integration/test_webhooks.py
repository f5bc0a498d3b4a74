"""Webhooks with real processes: a run that fails or succeeds POSTs its event to the job's URL, else to the
master's default, and a failed delivery is retried."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import pytest

from harness import EXAMPLES, Cluster, wait_for
from sparkyard import errors
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"


class Receiver:
    """An HTTP endpoint on loopback that records every POST; ``/flaky`` answers 500 to its first."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, str, dict[str, Any]]] = []  # path, X-Sparkyard-Event, body
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                first = not any(p == self.path for p, _, _ in received)
                received.append((self.path, self.headers["X-Sparkyard-Event"], body))
                self.send_response(500 if self.path == "/flaky" and first else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def to(self, path: str) -> list[dict[str, Any]]:
        return [body for p, _, body in self.posts if p == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_runs_post_their_end_to_the_job_s_url_or_the_master_s_and_failed_posts_are_retried(
        make_cluster: Callable[..., Cluster], receiver: Receiver) -> None:
    cluster = make_cluster()
    cluster.start_master("--on-failure", f"{receiver.url}/default")
    cluster.start_worker("w1", slots=1)
    cluster.wait_workers("w1")
    client = cluster.client()

    failing = client.submit(f"{TASKS}:always_fail")  # no URL of its own: the master's default
    failed, _ = client.wait(first_run_id(failing), timeout=120)
    succeeding = client.submit(f"{TASKS}:noop", on_success=f"{receiver.url}/flaky")
    succeeded, _ = client.wait(first_run_id(succeeding), timeout=120)
    assert (failed.state, succeeded.state) == (pb.RUN_FAILED, pb.RUN_SUCCEEDED)

    (body,) = wait_for(lambda: receiver.to("/default"), 60, "the failed run's event at the master's URL")
    assert body["event"] == "run.failed" and body["run"]["id"] == failed.id and body["run"]["state"] == "FAILED"
    assert body["job"] == {"id": failing.id, "name": "tasks:always_fail"}
    # The first POST got a 500; the retry (after about 1 s) is taken.
    flaky = wait_for(lambda: len(receiver.to("/flaky")) >= 2 and receiver.to("/flaky"), 60, "the retried event")
    assert [b["run"]["id"] for b in flaky] == [succeeded.id, succeeded.id]
    assert {(path, event) for path, event, _ in receiver.posts} == {("/default", "run.failed"),
                                                                      ("/flaky", "run.succeeded")}


def test_a_webhook_url_that_is_not_http_is_refused_naming_the_option(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    with pytest.raises(errors.InvalidArgument, match="on_failure: 'ftp://x/y' is not an http"):
        client.submit(f"{TASKS}:noop", on_failure="ftp://x/y")
