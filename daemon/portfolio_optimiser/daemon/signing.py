"""Which verdicts must be signed, and the trust files they are checked against, as the disk has them.

Decides: where a verdict's signature lies (``NAME.json.sig``, beside it, where ``ssh-keygen -Y
sign`` writes it), whether the policy (``[verdicts] require_signature``) asks for one, and what
``config/allowed_signers`` and ``config/revoked_keys`` say now. The files are read again when
they change (their size and mtime), never cached past an edit; a stamp of the policy and both
files marks a verdict refused under them, so an edit of either checks it again.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from portfolio_optimiser.context.signature import (
    ALLOWED_NAME,
    Proof,
    SignatureRefused,
    Trust,
    read_trust,
    sign_command,
    verify_signature,
)
from portfolio_optimiser.context.verdict import Verdict

__all__ = ["SIG_SUFFIX", "Signing", "signature_path", "signed_verdict"]

SIG_SUFFIX: Final = ".sig"


def signature_path(verdict_file: Path) -> Path:
    return verdict_file.with_name(verdict_file.name + SIG_SUFFIX)


def signed_verdict(path: Path) -> Path | None:
    """The verdict file a signature belongs to (``NAME.json.sig`` → ``NAME.json``)."""
    if path.name.lower().endswith(".json" + SIG_SUFFIX):
        return path.with_name(path.name[: -len(SIG_SUFFIX)])
    return None


@dataclass(frozen=True)
class _Read:
    key: tuple[tuple[int, int] | None, tuple[int, int] | None]
    trust: Trust
    stamp: str


class Signing:
    """The policy and the workspace's trust files; one per intake (its thread, and the loop's)."""

    def __init__(self, policy: str, config_dir: Path) -> None:
        self.policy = policy
        self.allowed = config_dir / "allowed_signers"
        self.revoked = config_dir / "revoked_keys"
        self._read: _Read | None = None
        self._lock = threading.Lock()

    def requires(self, verdict: Verdict) -> bool:
        return self.policy == "all" or (self.policy == "approvals" and verdict.approves)

    def prove(
        self, verdict: Verdict, data: bytes, sig: bytes | None, name: str, *, at: datetime
    ) -> tuple[Proof | None, str]:
        """What the signature proves (None: unsigned, which the policy allows), and a note when
        a signature was left unchecked; raises :class:`SignatureRefused` with the reason."""
        if sig is None:
            if self.requires(verdict):
                raise SignatureRefused(
                    f"this {verdict.decision.value} verdict is not signed, and [verdicts] "
                    f"require_signature = {self.policy!r} asks for a signature; sign it with "
                    f"`{sign_command(name)}` (it writes {name}{SIG_SUFFIX} beside it); it is not "
                    "promoted until then"
                )
            return None, ""
        trust, _stamp = self.trust()
        if not trust.present and not self.requires(verdict):
            return (
                None,
                f"its signature was not checked: there is no {ALLOWED_NAME} in the workspace",
            )
        proof = verify_signature(
            data, sig, identity=verdict.reviewer, trust=trust, at=at, name=name
        )
        return proof, ""

    def trust(self) -> tuple[Trust, str]:
        """What the files say now, and the stamp of the policy and their bytes."""
        key = (_stat(self.allowed), _stat(self.revoked))
        with self._lock:
            if self._read is None or self._read.key != key:
                try:
                    allowed, revoked = _text(self.allowed), _text(self.revoked)
                except OSError as exc:
                    # Unreadable is not absent: a revocation list skipped would let its keys in.
                    allowed = revoked = None
                    trust = Trust(
                        problems=(
                            f"{exc.filename} cannot be read ({exc.strerror}); fix its permissions",
                        ),
                        present=True,
                    )
                else:
                    trust = read_trust(allowed, revoked)
                stamp = hashlib.sha256(
                    f"{self.policy}\0{allowed}\0{revoked}".encode("utf-8", "surrogateescape")
                ).hexdigest()[:16]
                self._read = _Read(key, trust, f"trust:{stamp}")
            return self._read.trust, self._read.stamp


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


def _text(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return None
