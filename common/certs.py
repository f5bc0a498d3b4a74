"""``sparkyard certs DIR``: a development CA and the certificates a TLS cluster needs, in one command.

Writes into DIR::

    ca.crt                  the CA certificate: every client and worker trusts it (--tls-ca); a master
                            given it as --tls-client-ca requires callers to show a certificate it signed
    server.crt, server.key  the masters' certificate (--tls-cert, --tls-key); it names every host given
                            with --host, plus localhost, 127.0.0.1 and ::1
    client.crt, client.key  a certificate for clients and workers, for mutual TLS (--tls-cert, --tls-key)

Keys are EC P-256 (fast handshakes, small certificates) and written 0600. The CA's key is not kept: nothing
can sign another certificate under this CA later (make a new set instead). Meant for development and tests;
in production use your organisation's CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# A development set lasts long enough not to expire under a long-running test cluster or a laptop set-up.
VALIDITY = datetime.timedelta(days=825)
# Names every server certificate carries, so a master on loopback is reachable under its usual names.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
FILES = ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")


class CertsError(ValueError):
    """The certificates cannot be written as asked (the message says why)."""


@dataclass(frozen=True)
class DevCerts:
    """Paths of one set of development certificates (the files of :data:`FILES`, in that order)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    @classmethod
    def in_dir(cls, directory: Path) -> DevCerts:
        return cls(*(directory / name for name in FILES))

    @property
    def directory(self) -> Path:
        return self.ca.parent


def _subject_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys([*hosts, *LOOPBACK_NAMES]):
        host = host.strip().strip("[]")
        if not host:
            raise CertsError("--host: an empty host name")
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _builder(subject: str, issuer: str, key: ec.EllipticCurvePrivateKey,
             now: datetime.datetime) -> x509.CertificateBuilder:
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY))


def _leaf(name: str, usage: list[x509.ObjectIdentifier], sans: list[x509.GeneralName] | None,
          ca_key: ec.EllipticCurvePrivateKey, ca_name: str,
          now: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (_builder(name, ca_name, key, now)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usage), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def make_dev_certs(directory: Path, hosts: Sequence[str] = ()) -> DevCerts:
    """A new CA, a server certificate naming ``hosts`` (and loopback) and a client certificate, written
    into ``directory`` (created if needed). Refuses to overwrite an existing set."""
    directory.mkdir(parents=True, exist_ok=True)
    existing = [name for name in FILES if (directory / name).exists()]
    if existing:
        raise CertsError(f"{directory} already holds {', '.join(existing)}: remove them or choose another DIR")
    sans = _subject_names(hosts)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_name = "Sparkyard development CA"
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (_builder(ca_name, ca_name, ca_key, now)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))
    # The masters' certificate is a client one too: a standby's console calls the leader with it (mutual TLS).
    server, server_key = _leaf("sparkyard-master", [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
                               sans, ca_key, ca_name, now)
    client, client_key = _leaf("sparkyard-client", [ExtendedKeyUsageOID.CLIENT_AUTH], None, ca_key, ca_name, now)
    certs = DevCerts.in_dir(directory)
    pem = serialization.Encoding.PEM
    for path, cert in ((certs.ca, ca), (certs.server_cert, server), (certs.client_cert, client)):
        _write(path, cert.public_bytes(pem), 0o644)
    for path, key in ((certs.server_key, server_key), (certs.client_key, client_key)):
        _write(path, key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), 0o600)
    return certs
