"""Real SSH keys and signatures for the tests, made by ``ssh-keygen`` itself (OpenSSH).

Without ``ssh-keygen`` the tests that need it skip and say why; under ``CI=true`` that is a
failure, never a skip (CI installs openssh-client)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from portfolio_optimiser.context.signature import NAMESPACE


def ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        reason = "ssh-keygen (Debian's openssh-client) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI installs it, so this is a failure, not a skip")
        pytest.skip(reason)
    return found


@dataclass(frozen=True)
class Key:
    path: Path

    @property
    def public(self) -> str:
        """``TYPE BASE64`` without the comment, as an allowed-signers line takes it."""
        return " ".join(self.path.with_suffix(".pub").read_text().split()[:2])

    @property
    def fingerprint(self) -> str:
        out = subprocess.run(
            [ssh_keygen(), "-l", "-E", "sha256", "-f", str(self.path.with_suffix(".pub"))],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return out.split()[1]

    @property
    def certificate(self) -> Path:
        return self.path.with_name(self.path.name + "-cert.pub")

    def certify(self, ca: Key, *principals: str, valid: str = "20261101:+104w") -> Path:
        """``ssh-keygen -s CA``: a user certificate for ``principals`` (``-V`` ``valid``). By
        default valid from a fixed day before the tests' own moment (``test_signature.NOW``) to
        two years past the wall clock's, so it holds at both (``-1d`` stopped holding at NOW
        the day after NOW was written)."""
        subprocess.run(
            [ssh_keygen(), "-q", "-s", str(ca.path), "-I", f"{self.path.name}-cert",
             "-n", ",".join(principals), "-V", valid, str(self.path.with_suffix(".pub"))],
            check=True,
            capture_output=True,
        )  # fmt: skip
        return self.certificate

    def sign(
        self,
        file: Path,
        *,
        namespace: str = NAMESPACE,
        to: Path | None = None,
        with_certificate: bool = False,
    ) -> Path:
        """``ssh-keygen -Y sign`` (with the key's certificate if asked); the signature is
        ``FILE.sig`` (moved to ``to`` if given)."""
        sig = file.with_name(file.name + ".sig")
        sig.unlink(missing_ok=True)  # ssh-keygen asks before it overwrites
        key = self.certificate if with_certificate else self.path
        subprocess.run(
            [ssh_keygen(), "-Y", "sign", "-q", "-n", namespace, "-f", str(key), str(file)],
            check=True,
            capture_output=True,
        )
        if to is not None:
            sig.replace(to)
            return to
        return sig


def make_key(folder: Path, name: str, kind: str = "ed25519", bits: int | None = None) -> Key:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    bits = bits or (2048 if kind == "rsa" else None)
    extra = ["-b", str(bits)] if bits else []
    subprocess.run(
        [ssh_keygen(), "-q", "-t", kind, *extra, "-N", "", "-C", name, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return Key(path)


def keygen_verifies(
    allowed: Path, identity: str, sig: Path, message: Path, *, at: str, revoked: Path | None = None
) -> bool:
    """What ``ssh-keygen -Y verify`` says of the same files at ``at`` (YYYYMMDD[HHMM[SS]][Z])."""
    extra = ["-r", str(revoked)] if revoked is not None else []
    with message.open("rb") as stdin:
        done = subprocess.run(
            [ssh_keygen(), "-Y", "verify", "-f", str(allowed), "-I", identity, "-n", NAMESPACE,
             "-s", str(sig), f"-Overify-time={at}", *extra],
            stdin=stdin,
            capture_output=True,
        )  # fmt: skip
    return done.returncode == 0
