"""Every gRPC channel to a master is opened here, from the caller's config: TLS or plaintext, the same way
for the client, the CLI, workers (their stream, their bundle fetches and their probes of a silent master
all use the stream's channel) and the tests.

TLS is on when the config names a CA (``tls_ca``): the master's certificate must be signed by it and name
the address dialled (``sparkyard certs --host`` puts every master address in the certificate). With
``tls_cert`` and ``tls_key`` the caller also shows a certificate of its own, for a master started with
``--tls-client-ca`` (mutual TLS). Without a CA the channel is plaintext, which a master accepts on
loopback (or with ``--insecure``).

What a caller's channel does with failures lives here too: gRPC's own retry of UNAVAILABLE
(:data:`SERVICE_CONFIG`) and the mapping of a failed call to a Sparkyard error (:func:`translate`).
"""

from __future__ import annotations

import json
from typing import Literal, Protocol, Sequence, overload

import grpc

from sparkyard import errors
from sparkyard.config_source import read_file

Options = Sequence[tuple[str, object]]


class TlsSettings(Protocol):
    """The part of a client's or worker's config this module reads."""

    tls_ca: str
    tls_cert: str
    tls_key: str


def credentials(cfg: TlsSettings) -> grpc.ChannelCredentials | None:
    """The channel credentials ``cfg`` asks for; None for a plaintext channel."""
    if not cfg.tls_ca:
        return None
    ca = read_file(cfg.tls_ca, "tls_ca")
    if not cfg.tls_cert:
        return grpc.ssl_channel_credentials(root_certificates=ca)
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=read_file(cfg.tls_key, "tls_key"),
                                        certificate_chain=read_file(cfg.tls_cert, "tls_cert"))


@overload
def open_channel(address: str, cfg: TlsSettings, options: Options = (), *,
                 asynchronous: Literal[False] = False) -> grpc.Channel: ...


@overload
def open_channel(address: str, cfg: TlsSettings, options: Options = (), *,
                 asynchronous: Literal[True]) -> grpc.aio.Channel: ...


def open_channel(address: str, cfg: TlsSettings, options: Options = (), *,
                 asynchronous: bool = False) -> grpc.Channel | grpc.aio.Channel:
    """A channel to the master at ``address`` (``asynchronous``: a ``grpc.aio`` one), secured as ``cfg``
    says. An unreadable TLS file is a :class:`ConfigError` naming the setting."""
    creds = credentials(cfg)
    opts = list(options)
    if asynchronous:
        if creds is None:
            return grpc.aio.insecure_channel(address, options=opts)
        return grpc.aio.secure_channel(address, creds, options=opts)
    if creds is None:
        return grpc.insecure_channel(address, options=opts)
    return grpc.secure_channel(address, creds, options=opts)


# gRPC's own retry of UNAVAILABLE (master restarting, Redis restarting): attempts and backoff. Bundle
# calls too (a submit asks HasBundle first, which reads Redis; an upload is content-addressed, so a retry
# stores the same bytes): without them the first submit after a Redis restart failed at once.
SERVICE_CONFIG = json.dumps({
    "methodConfig": [{
        "name": [{"service": "sparkyard.v1.JobService"}, {"service": "sparkyard.v1.ClusterService"},
                 {"service": "sparkyard.v1.BundleService"}],
        "retryPolicy": {
            "maxAttempts": 5,
            "initialBackoff": "0.2s",
            "maxBackoff": "3s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        },
    }]
})


def tls_hint(cfg: TlsSettings) -> str:
    """A failed TLS handshake reaches a client as a closed socket: what its settings may lack, for the error."""
    if not cfg.tls_ca:
        return " (if the master uses TLS, give --tls-ca or SPARKYARD_TLS_CA)"
    if not cfg.tls_cert:
        return (" (if the master requires client certificates, give --tls-cert and --tls-key; check too that "
                "--tls-ca signed its certificate and that it names this address)")
    return " (check that --tls-ca signed the master's certificate and that it names this address)"


def answered(exc: grpc.RpcError) -> bool:
    """Whether a master's servicer gave this error (marked with ``errors.ANSWERED_METADATA``), not the
    transport."""
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    return any(key == errors.ANSWERED_METADATA for key, _ in trailing or ())


def translate(exc: grpc.RpcError, master: str, hint: str = "") -> errors.SparkyardError:
    """A gRPC error as the matching Sparkyard error (``hint``: what to check when no master is reachable)."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code == grpc.StatusCode.UNAVAILABLE and answered(exc):  # the master answered: its reason, as it gave it
        return errors.Unavailable(f"master {master}: {details}")
    if code == grpc.StatusCode.UNAVAILABLE:
        if "Connection refused" in details:  # nothing listens there: TLS settings are not the cause
            return errors.Unavailable(f"no master listening at {master} (connection refused): is it running, "
                                      "and is this its address?")
        return errors.Unavailable(f"no master reachable at {master}: {details}{hint}")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.Unavailable(f"master {master} did not answer in time: {details}")
    cls = errors.BY_CODE_NAME.get(code.name, errors.SparkyardError)
    return cls(details or code.name)
