"""HOST:PORT settings: how they are read (``--master``, ``--connect-url``, listen addresses) and what they say
about who can reach them: an address on loopback is reachable from this machine only, so a master or worker
may serve it without TLS or a token (docs/security.md)."""

from __future__ import annotations

from sparkyard.config_load import ConfigError
from sparkyard.defaults import DEFAULT_CONNECT_PORT, DEFAULT_MASTER


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1", "[::1]") or host.startswith("127.")


def master_addresses(text: str) -> list[str]:
    """The masters a ``--master`` names (``HOST[:PORT]``, comma-separated): a host alone gets the masters'
    default port, not gRPC's 443; a port outside 1..65535 is refused naming it (gRPC would wrap it)."""
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or host.endswith(":") or (item.startswith("[") and not host.endswith("]")):
            host, port = item, DEFAULT_MASTER.rpartition(":")[2]  # a host alone, or a bare IPv6 address
            if ":" in host and not host.startswith("["):
                host = f"[{host}]"
        if not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"master {item!r} is not HOST:PORT (a port is 1..65535; without one, "
                              f"{DEFAULT_MASTER.rpartition(':')[2]} is used)")
        out.append(f"{host}:{int(port)}")
    if not out:
        raise ConfigError("master: give HOST:PORT (or a comma-separated list of them)")
    return out


def check_host_port(address: str, name: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{name} {address!r} is not HOST:PORT")


def connect_address(url: str) -> tuple[str, int]:
    """(host, port) of a Spark Connect URL, ``sc://HOST[:PORT][/;param=value…]``."""
    problem = f"connect_url (--connect-url) {url!r} is not sc://HOST:PORT"
    if not url.startswith("sc://"):
        raise ConfigError(problem)
    authority = url[len("sc://"):].split("/", 1)[0]
    host, sep, port = authority.rpartition(":")
    if not sep:
        host, port = authority, str(DEFAULT_CONNECT_PORT)
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError(problem)
    return host.strip("[]"), int(port)
