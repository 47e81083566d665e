"""A certificate authority made for one run, and the server certificate it signs for the run's Redis (or a
dashboard that listens beyond loopback, whose browser is shown the certificate's fingerprint instead).

A private Redis that listens beyond loopback speaks only TLS. Its clients
trust this run's CA alone (not the system's), so a server on another address
or another run's server is refused. The CA's certificate is public and
travels inside the run's Redis URL (`ssl_ca_data`), so executors on other
hosts need no shared file. The private keys never leave the driver's host:
the server's key is a file only redis-server reads (a private folder, mode
0600), and the CA's key is not kept at all once the server's certificate is signed.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_FOR = datetime.timedelta(days=30)  # longer than any run; a resumed run gets a new CA


@dataclass(frozen=True)
class ServerCertificates:
    """The files redis-server reads, and the CA certificate its clients trust (PEM text)."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    ca_pem: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alternative_names(addresses: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for address in addresses:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError:
            names.append(x509.DNSName(address))
    return names


def make_server_certificates(folder: Path, addresses: list[str], run: str, server: str = "redis"
                             ) -> ServerCertificates:
    """A new CA for `run`, and a certificate for its `server` (redis, dashboard) reached at any of `addresses`
    (IPs or host names), written into `folder` (which should be private to this user)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + VALID_FOR  # a little clock skew between hosts
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"ddq run {run} CA")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (x509.CertificateBuilder().subject_name(_name(f"ddq run {run} {server}")).issuer_name(ca_name)
                   .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.SubjectAlternativeName(_alternative_names(addresses)), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM).decode()
    files = ServerCertificates(folder / f"{server}.crt", folder / f"{server}.key", folder / "ca.crt", ca_pem)
    files.ca_file.write_text(ca_pem)
    files.cert_file.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    descriptor = os.open(files.key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
    return files
