"""HOST:PORT settings: how they are read (``--master``, ``--connect-url``, listen addresses) and what they say
about who can reach them: an address on loopback is reachable from this machine only, so a master or worker
may serve it without TLS or a token (docs/security.md)."""

from __future__ import annotations

import errno
import socket

from sparkyard.config_source import ConfigError
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
        if "://" in item or "/" in item:  # a URL (http://host:7070): gRPC would fail to resolve it, unexplained
            raise ConfigError(f"master {item!r} is not HOST:PORT: give the address without a scheme or path, "
                              f"e.g. {item.split('://', 1)[-1].split('/', 1)[0] or DEFAULT_MASTER}")
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
    if not sep or not host or "/" in host or not port.isdigit() or not 0 <= int(port) <= 65535:
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


def holder_of(port: int) -> str:
    """' by pid N (its command)' of the process listening on TCP ``port``, '' when none can be seen (another
    user's sockets show no pid to an unprivileged caller)."""
    import psutil  # only a server about to listen asks: the client does not wait for it

    try:
        connections = psutil.net_connections("tcp")
    except (psutil.Error, OSError):
        return ""
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            try:
                command = " ".join(psutil.Process(conn.pid).cmdline()[:4])
            except psutil.Error:
                command = ""
            return f" by pid {conn.pid}" + (f" ({command})" if command else "")
    return ""


def in_use(host: str, port: int) -> str:
    """'' unless something listens on ``host:port`` already; then 'address in use' and its holder when it can be
    found. Why a server asks before it listens: gRPC's own error for a taken port is a multi-line core log
    that names no holder (and with SO_REUSEPORT it would even share the port with the holder)."""
    if port == 0:
        return ""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except OSError:
        return ""  # not resolvable here: the server's own error says so
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is free to listen on
        try:
            probe.bind(address)
        except OSError as exc:
            return f"address in use{holder_of(port)}" if exc.errno == errno.EADDRINUSE else ""
    return ""
