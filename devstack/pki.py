"""Certificates for the throwaway control plane: one CA, a serving certificate
for 127.0.0.1, and client certificates whose subject carries the Kubernetes
identity (CN = user, O = groups).

Client certificates rather than static tokens because that is how a real
cluster hands an operator a credential that survives restarts, and because the
API server needs no extra flag file to accept them.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.write_bytes(self.key_pem)
        key_path.chmod(0o600)
        return cert_path, key_path


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)


def make_ca(common_name: str = "tenant-gateway-local-ca") -> tuple[KeyPair, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)), key


def load_ca(directory: Path) -> tuple[KeyPair, ec.EllipticCurvePrivateKey]:
    """The CA written by `make_ca` into `directory` as ca.crt and ca.key."""
    pair = KeyPair((directory / "ca.crt").read_bytes(), (directory / "ca.key").read_bytes())
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return pair, key


def common_name(cert_path: Path) -> str:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def issue(
    ca: KeyPair,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    common_name: str,
    organizations: tuple[str, ...] = (),
    server_hosts: tuple[str, ...] = (),
) -> KeyPair:
    """Issue a client certificate, or a serving one when `server_hosts` is given."""
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attributes += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if server_hosts:
        names: list[x509.GeneralName] = []
        for host in server_hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        usage = ExtendedKeyUsageOID.SERVER_AUTH
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH
    builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def make_service_account_signing_key() -> bytes:
    """RSA, because every Kubernetes release accepts it for both the signing and
    the verification flag; one key serves both."""
    return _key_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))
