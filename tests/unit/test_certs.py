"""``sparkyard certs``: a development CA whose server certificate names the hosts given, keys kept private."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from sparkyard.certs import CertsError, make_dev_certs
from sparkyard.cli.main import main


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_the_server_certificate_names_the_hosts_given_and_loopback(tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path, ["10.1.2.3", "master.example", "[::2]"])
    sans = _load(certs.server_cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == {"master.example", "localhost"}
    assert set(sans.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address(a) for a in
                                                             ("10.1.2.3", "127.0.0.1", "::1", "::2")}


def test_both_certificates_are_signed_by_the_ca_for_their_use(tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path)
    ca = _load(certs.ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # The masters' certificate serves, and is shown by a standby's console calling the leader (mutual TLS).
    for path, usages in ((certs.server_cert, [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                         (certs.client_cert, [ExtendedKeyUsageOID.CLIENT_AUTH])):
        cert = _load(path)
        cert.verify_directly_issued_by(ca)
        assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == usages


def test_keys_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path)
    for key in (certs.server_key, certs.client_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "client.crt", "client.key", "server.crt",
                                                          "server.key"]  # the CA's key is not kept


def test_an_existing_set_is_never_overwritten(tmp_path: Path) -> None:
    certs = make_dev_certs(tmp_path)
    before = certs.ca.read_bytes()
    with pytest.raises(CertsError, match="already holds ca.crt"):
        make_dev_certs(tmp_path)
    assert certs.ca.read_bytes() == before


def test_the_cli_verb_writes_a_set_and_refuses_a_second_with_exit_2(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", str(tmp_path / "tls"), "--host", "m1.example"]) == 0
    assert "--tls-ca" in capsys.readouterr().out
    assert main(["certs", str(tmp_path / "tls")]) == 2
    assert "already holds" in capsys.readouterr().err
