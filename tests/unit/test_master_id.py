"""A master's id in the leader lease: stable across a restart on the same address, distinct per master."""

from __future__ import annotations

import socket

from sparkyard.master.services import master_id


def test_a_routable_address_is_the_id_so_masters_on_hosts_with_one_name_differ() -> None:
    assert master_id("198.18.0.3:7070") != master_id("198.18.0.4:7070")
    assert master_id("198.18.0.3:7070") == "198.18.0.3:7070"


def test_loopback_and_wildcard_addresses_take_the_host_name() -> None:
    host = socket.gethostname()
    for address in ("127.0.0.1:7070", "0.0.0.0:7070", "localhost:7070", "[::1]:7070", ":7070"):
        assert master_id(address) == f"{host}:7070", address
