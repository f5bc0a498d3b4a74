"""The verbs that need no master: ``sparkyard local`` (Redis, a master and workers here until Ctrl-C) and
``sparkyard certs`` (a development CA and certificates). They never open a client, so they live apart from
the dispatch of the verbs that do."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import Any

from sparkyard.cli import render
from sparkyard.config_source import read_secret


def cmd_certs(args: argparse.Namespace) -> int:
    from sparkyard.certs import CertsError, make_dev_certs  # cryptography: only this verb needs it

    try:
        certs = make_dev_certs(Path(args.dir), args.host)
    except CertsError as exc:
        print(f"sparkyard certs: {exc}", file=sys.stderr)
        return 2
    if args.json:
        render.print_json({"ca": str(certs.ca), "server_cert": str(certs.server_cert),
                           "server_key": str(certs.server_key), "client_cert": str(certs.client_cert),
                           "client_key": str(certs.client_key)})
    else:
        d = certs.directory
        print(f"wrote {certs.ca}, {certs.server_cert}, {certs.server_key}, {certs.client_cert}, {certs.client_key}\n"
              f"master: sparkyard-master --tls-cert {d}/server.crt --tls-key {d}/server.key "
              f"[--tls-client-ca {d}/ca.crt]\n"
              f"clients and workers: --tls-ca {d}/ca.crt [--tls-cert {d}/client.crt --tls-key {d}/client.key]")
    return 0


def cmd_local(args: argparse.Namespace) -> int:
    from sparkyard.cli.local import LocalCluster, StartInterrupted

    cluster = LocalCluster(workers=args.workers, slots=args.slots, listen=args.listen, data_dir=Path(args.data_dir),
                           runner=args.runner, http=args.http,
                           token=args.token or (read_secret(args.token_file, "token") if args.token_file else ""))
    stop = {"now": False, "starting": True}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True
        if stop["starting"]:  # start-up blocks (a master coming up, workers warming): leave it at once
            cluster.interrupt(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        address = cluster.start()
        stop["starting"] = False
    except StartInterrupted as interrupted:
        stop["starting"] = False
        print("sparkyard local: stopped while starting; stopping what was started", file=sys.stderr, flush=True)
        cluster.stop()
        return 128 + interrupted.signum
    if args.json:
        render.print_json({"master": address, "workers": args.workers, "slots": args.slots,
                           "data_dir": str(cluster.data_dir), "pids": [p.pid for p in cluster.processes]})
    else:
        console = f", console http://{args.http}/" if args.http else ""
        print(f"local cluster ready: master {address}{console}, {render.plural(args.workers, 'worker')} x "
              f"{render.plural(args.slots, 'slot')} (logs in {cluster.logs}); Ctrl-C stops it", flush=True)
    try:
        while not stop["now"]:
            if not cluster.supervise():
                print("sparkyard local: the master exited; stopping the cluster", file=sys.stderr)
                break
            time.sleep(0.5)  # waiting for Ctrl-C / SIGTERM
    finally:
        cluster.stop()
    return 0
