"""Certificates made at test time (``cryptography``), for the TLS tests (no tests here):
``Pki`` writes a CA to a folder and signs keystores for 127.0.0.1/localhost or any host
name, or signs them by a second CA that nobody trusts."""
from __future__ import annotations

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject_key, cn, issuer_key, issuer_cn, *, ca=False, sans=()):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(issuer_cn))
         .public_key(subject_key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        alt = [x509.IPAddress(ipaddress.ip_address(s)) if s[0].isdigit() else x509.DNSName(s) for s in sans]
        b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem_key(key, password=None):
    enc = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc).decode()


def _pem_cert(cert):
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class Pki:
    """A CA in ``base`` and helpers for keystores signed by it (or by a stranger CA)."""

    def __init__(self, base):
        self.base = base
        self.ca_key = _key()
        self.ca = _cert(self.ca_key, "kraft test CA", self.ca_key, "kraft test CA", ca=True)
        self.cafile = self._write("ca.pem", _pem_cert(self.ca))
        self.other_key = _key()
        self.other = _cert(self.other_key, "stranger CA", self.other_key, "stranger CA", ca=True)
        self.other_cafile = self._write("other-ca.pem", _pem_cert(self.other))

    def _write(self, name, text):
        path = os.path.join(self.base, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def keystore(self, name, sans=("127.0.0.1", "localhost"), *, stranger=False, password=None):
        """A PEM file with the key and the certificate chain; returns (path, key pem, chain pem)."""
        k = _key()
        ik, icn, ic = (self.other_key, "stranger CA", self.other) if stranger else (self.ca_key, "kraft test CA",
                                                                                     self.ca)
        cert = _cert(k, name, ik, icn, sans=sans)
        key_pem, chain = _pem_key(k, password), _pem_cert(cert) + _pem_cert(ic)
        return self._write(f"{name}.pem", key_pem + chain), key_pem, chain
