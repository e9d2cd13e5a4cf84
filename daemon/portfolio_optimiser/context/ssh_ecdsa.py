"""ECDSA keys for signed verdicts: NIST P-256, P-384 and P-521, as ``ssh-keygen -t ecdsa`` makes
them. ``sshsig`` reads ed25519 and RSA keys only, and offices whose policy asks for NIST curves
sign with these; without them, one such line in ``config/allowed_signers`` would leave every
reviewer's approval unchecked.

The key is added to ``sshsig``'s own table of key algorithms (``PublicKeyAlgorithm.supported``),
so a plain key, a certificate's key and a revoked key are all read by the one parser. The
arithmetic is ``cryptography``'s: an SSH ECDSA signature is the pair (r, s) as two mpints
(RFC 5656 §3.1.2), hashed with SHA-256, SHA-384 or SHA-512 by curve size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from sshsig.binary_io import SshReader, ssh_read_string_pair
from sshsig.ssh_public_key import PublicKey, PublicKeyAlgorithm

__all__ = ["CURVES", "EcdsaPublicKey", "register"]


@dataclass(frozen=True)
class _Curve:
    name: str
    """The curve's SSH name, as in ``ecdsa-sha2-nistp256``."""
    curve: ec.EllipticCurve
    hash: hashes.HashAlgorithm


CURVES: Final = (
    _Curve("nistp256", ec.SECP256R1(), hashes.SHA256()),
    _Curve("nistp384", ec.SECP384R1(), hashes.SHA384()),
    _Curve("nistp521", ec.SECP521R1(), hashes.SHA512()),
)


class _EcdsaAlgorithm(PublicKeyAlgorithm):
    def __init__(self, curve: _Curve) -> None:
        self._curve = curve

    @property
    def name(self) -> str:
        return f"ecdsa-sha2-{self._curve.name}"

    def load_public_key(self, pkt: SshReader) -> PublicKey:
        named = pkt.read_string().decode("ascii", "replace")
        if named != self._curve.name:
            raise ValueError(f"an {self.name} key names the curve {named!r}")
        return EcdsaPublicKey(self._curve, pkt.read_string())


class EcdsaPublicKey(PublicKey):
    def __init__(self, curve: _Curve, point: bytes) -> None:
        self._curve, self._point = curve, point
        self._impl = ec.EllipticCurvePublicKey.from_encoded_point(curve.curve, point)

    @property
    def algo_name(self) -> str:
        return f"ecdsa-sha2-{self._curve.name}"

    def do_verify(self, signature: bytes, message: bytes) -> Exception | None:
        try:
            algo, blob = ssh_read_string_pair(signature)
            numbers = SshReader.from_bytes(blob)
            r, s = numbers.read_mpint(), numbers.read_mpint()
        except ValueError as exc:
            return InvalidSignature(f"the signature cannot be read ({exc})")
        if algo.decode("ascii", "replace") != self.algo_name:
            return InvalidSignature(f"an {self.algo_name} key made an {algo!r} signature")
        try:
            self._impl.verify(encode_dss_signature(r, s), message, ec.ECDSA(self._curve.hash))
        except InvalidSignature as exc:
            return exc
        return None

    def openssh_str(self) -> str:
        return self._impl.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode("ascii")

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, EcdsaPublicKey) and (other._curve.name, other._point) == (
            self._curve.name,
            self._point,
        )

    def __hash__(self) -> int:
        return hash((self._curve.name, self._point))


def register() -> None:
    """Put the ECDSA keys beside ``sshsig``'s own, once (the table is filled from
    ``supported_algos`` only while it is empty, so theirs are put in too)."""
    table = PublicKeyAlgorithm.supported
    if all(f"ecdsa-sha2-{c.name}" in table for c in CURVES):
        return
    algorithms = [*PublicKeyAlgorithm.supported_algos(), *map(_EcdsaAlgorithm, CURVES)]
    PublicKeyAlgorithm.supported = {a.name: a for a in algorithms}
