"""What a user of ``sparkyard local`` sees, asked where the cluster listens (tests/integration/doc_local.py runs
it by ``ip netns exec`` in the network namespace of the cluster it checks, so it imports only sparkyard):
``python doc_local_probe.py CONSOLE_URL MASTER`` prints one JSON line, ``{"console": HTTP status or the error,
"workers": [ids of the live workers]}``."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

from sparkyard.client import Client


def console_status(url: str) -> int | str:
    """The console page's HTTP status, or the error that kept it from answering (no proxy: it is loopback)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=10) as page:
            return int(page.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def main(url: str, master: str) -> None:
    with Client(master) as client:
        workers = [w.id for w in client.workers() if w.alive]
    print(json.dumps({"console": console_status(url), "workers": workers}))


if __name__ == "__main__":
    main(*sys.argv[1:])
