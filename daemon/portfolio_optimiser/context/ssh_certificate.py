"""An SSH certificate in a signature: what it certifies, who issued it, for whom and until when.

Decides: whether an SSHSIG made with a certificate (``ssh-keygen -Y sign -f id_ed25519-cert.pub``)
signs the message with the certified key, and whether its certificate authority really signed the
certificate. Which authorities, principals and times count is the caller's (``signature``), as
``ssh-keygen`` leaves it to its allowed-signers file. The certificate is read by ``cryptography``;
the signature with the certified key is checked by ``sshsig``, as a plain key's is.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from cryptography.exceptions import InvalidSignature as BadCertificate
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    SSHCertificate,
    SSHCertificateType,
    load_ssh_public_identity,
)
from sshsig import InvalidSignature, PublicKey
from sshsig.binary_io import SshReader
from sshsig.sshsig import SshsigSignature, SshsigWrapper

from .ssh_ecdsa import register

register()  # a certificate's key or authority may be ECDSA

__all__ = ["CERT_SUFFIX", "Certified", "is_certificate", "open_certificate"]

CERT_SUFFIX: Final = "-cert-v01@openssh.com"
_FOREVER: Final = 2**64 - 1


@dataclass(frozen=True)
class Certified:
    key: PublicKey
    """The certified key, which made the signature."""
    authority: PublicKey
    """The key of the certificate authority that signed the certificate."""
    key_type: str
    key_id: str
    principals: tuple[str, ...]
    user: bool
    valid_after: datetime
    valid_before: datetime | None
    """None: valid for ever."""


def is_certificate(outer: SshsigSignature) -> bool:
    return _key_type(outer.public_key).endswith(CERT_SUFFIX)


def open_certificate(outer: SshsigSignature, message: bytes, namespace: str) -> Certified:
    """The certificate of a signature that signs ``message`` for ``namespace`` with the key it
    certifies. Raises ``sshsig.InvalidSignature`` when the signature does not sign the message,
    and ``ValueError`` (the reason) when the certificate cannot be read or its authority's
    signature on it does not hold."""
    key_type = _key_type(outer.public_key)
    try:
        cert = load_ssh_public_identity(
            key_type.encode("ascii") + b" " + base64.b64encode(outer.public_key)
        )
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"its certificate cannot be read ({exc})") from None
    if not isinstance(cert, SSHCertificate):
        raise ValueError("its key is not a certificate")
    try:
        cert.verify_cert_signature()
    except (BadCertificate, UnsupportedAlgorithm):
        raise ValueError("its certificate's signature by its authority does not hold") from None
    key, authority = _openssh(cert.public_key()), _openssh(cert.signature_key())
    hash_name = outer.hash_algo.decode("ascii", "replace").lower()
    if hash_name not in {"sha256", "sha512"}:
        raise ValueError(f"its hash {hash_name!r} is not one ssh-keygen makes")
    signed = SshsigWrapper(
        namespace=namespace.encode("ascii"),
        hash_algo=outer.hash_algo,
        hash=hashlib.new(hash_name, message).digest(),
    ).to_bytes()
    problem = key.do_verify(outer.signature, signed)
    if problem is not None:
        raise InvalidSignature(problem)
    return Certified(
        key=key,
        authority=authority,
        key_type=key_type,
        key_id=cert.key_id.decode("utf-8", "replace"),
        principals=tuple(p.decode("utf-8", "replace") for p in cert.valid_principals),
        user=cert.type is SSHCertificateType.USER,
        valid_after=datetime.fromtimestamp(cert.valid_after, UTC),
        valid_before=None
        if cert.valid_before >= _FOREVER
        else datetime.fromtimestamp(cert.valid_before, UTC),
    )


def _openssh(key: object) -> PublicKey:
    """A ``cryptography`` public key as ``sshsig``'s (ed25519, RSA and ECDSA; others raise)."""
    try:
        text = key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH)  # type: ignore[attr-defined]
        return PublicKey.from_openssh_str(text.decode("ascii"))
    except NotImplementedError as exc:
        raise ValueError(f"{exc}".rstrip(".")) from None


def _key_type(blob: bytes) -> str:
    try:
        return SshReader.from_bytes(blob).read_string().decode("ascii", "replace")
    except ValueError:
        return ""
