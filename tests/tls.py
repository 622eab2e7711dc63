"""
A throwaway certificate authority for HTTPS on 127.0.0.1: the key servers of the local repositories
(tests/apt_repo.py ``serve_keys``; a signing key is never fetched over plain http) present a
certificate it signed, and every node container trusts it (tests/harness.py ``Node.start`` adds it
to the node's CA bundle, the file apt's, curl's, dnf's and zypper's TLS libraries read). Made once
per test process in a temporary folder; nothing outside the node containers trusts it.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# Where Debian's TLS libraries (GnuTLS for apt, OpenSSL and libcurl) look for trusted certificates.
NODE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@dataclass(frozen=True)
class Authority:
    ca_pem: str  # what nodes trust
    certificate: Path  # the server's, for 127.0.0.1 and localhost
    key: Path


def _pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@functools.cache
def authority() -> Authority:
    folder = Path(tempfile.mkdtemp(prefix="gpu-node-test-ca-"))
    now = datetime.datetime.now(datetime.timezone.utc)
    valid = {"not_valid_before": now - datetime.timedelta(days=1), "not_valid_after": now + datetime.timedelta(days=7)}
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-node tests throwaway CA")])
    ca = (
        x509.CertificateBuilder(
            subject_name=ca_name,
            issuer_name=ca_name,
            public_key=ca_key.public_key(),
            serial_number=x509.random_serial_number(),
            **valid,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder(
            subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]),
            issuer_name=ca_name,
            public_key=server_key.public_key(),
            serial_number=x509.random_serial_number(),
            **valid,
        )
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    certificate, key = folder / "server.pem", folder / "server-key.pem"
    certificate.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(_pem(server_key))
    key.chmod(0o600)
    return Authority(ca.public_bytes(serialization.Encoding.PEM).decode(), certificate, key)
