"""Throwaway TLS material for a test server: a self-signed CA, a server certificate it signed for
127.0.0.1 / localhost, and a client certificate (for accounts that ``REQUIRE X509``); made with
``cryptography``, which Airflow already depends on."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TestCertificates:
    ca: Path  # the CA certificate clients verify the server with
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_test_certificates(folder: Path, days: int = 2) -> TestCertificates:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = (x509.CertificateBuilder().subject_name(name("mysqlcdc test CA")).issuer_name(name("mysqlcdc test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    def signed(common: str, extensions: list) -> tuple:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        builder = (x509.CertificateBuilder().subject_name(name(common)).issuer_name(ca.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    server, server_key = signed("127.0.0.1", [x509.SubjectAlternativeName(
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])])
    client, client_key = signed("mysqlcdc test client", [])
    files = TestCertificates(folder / "ca.pem", folder / "server-cert.pem", folder / "server-key.pem",
                             folder / "client-cert.pem", folder / "client-key.pem")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for cert, key, cert_path, key_path in ((server, server_key, files.server_cert, files.server_key),
                                           (client, client_key, files.client_cert, files.client_key)):
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
    return files
