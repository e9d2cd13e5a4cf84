"""``demo --signed``: the demo's expert signs the verdict with an SSH key the demo makes.

Decides: where the demo's key lives (the workspace's state folder: it signs nothing outside the
demo), how the workspace's ``config/allowed_signers`` lists it for the persona, and how the
verdict is signed — with ``ssh-keygen`` itself, as the reviewer's guide tells a reviewer to.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Final

from portfolio_optimiser.config import Config, Verdicts
from portfolio_optimiser.context.signature import NAMESPACE
from portfolio_optimiser.errors import UserError

from .signing import signature_path
from .workspace import Workspace

__all__ = ["POLICY", "DemoSigner", "promotion_lines"]

POLICY: Final = "approvals"


class DemoSigner:
    """The persona's key, made once in the workspace's state folder, and its allowed-signers line."""

    def __init__(self, workspace: Workspace, reviewer: str) -> None:
        found = shutil.which("ssh-keygen")
        if found is None:
            raise UserError(
                "demo --signed signs with ssh-keygen (OpenSSH), which is not installed here; "
                "install OpenSSH's client (Debian: openssh-client), or run the demo without --signed"
            )
        self.keygen, self.reviewer = found, reviewer
        self.key = workspace.state / "demo-signing-key"
        if not self.key.exists():
            self._run(
                "-q", "-t", "ed25519", "-N", "", "-C", f"demo {reviewer}", "-f", str(self.key)
            )
        public = " ".join(self.key.with_name(self.key.name + ".pub").read_text().split()[:2])
        allowed = workspace.root / "config" / "allowed_signers"
        allowed.parent.mkdir(parents=True, exist_ok=True)
        allowed.write_text(
            f"# The demo's expert, with the key demo --signed made ({self.key}).\n"
            f'{_quoted(reviewer)} namespaces="{NAMESPACE}" {public}\n',
            "utf-8",
        )

    @staticmethod
    def config(config: Config) -> Config:
        return config.model_copy(update={"verdicts": Verdicts(require_signature=POLICY)})

    def sign(self, verdict_file: Path) -> Path:
        """``ssh-keygen -Y sign``, as a reviewer runs it; the signature lands beside the file."""
        signature_path(verdict_file).unlink(missing_ok=True)  # ssh-keygen asks before replacing
        self._run("-Y", "sign", "-q", "-n", NAMESPACE, "-f", str(self.key), str(verdict_file))
        return signature_path(verdict_file)

    @property
    def fingerprint(self) -> str:
        listed = self._run(
            "-l", "-E", "sha256", "-f", str(self.key.with_name(self.key.name + ".pub"))
        )
        return listed.split()[1]

    def _run(self, *args: str) -> str:
        done = subprocess.run([self.keygen, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise UserError(f"ssh-keygen {args[0]} {args[1]} failed: {done.stderr.strip()}")
        return done.stdout


def _quoted(principal: str) -> str:
    return f'"{principal}"' if any(c.isspace() for c in principal) else principal


def promotion_lines(
    verdict: str, page: str, *, signed_with: str | None, reviewer: str
) -> list[str]:
    """The demo's second step, as it went: saved and promoted, or refused unsigned, then signed."""
    if signed_with is None:
        return [f"   saved as {verdict} and processed: promoted to {page}"]
    return [
        f"   saved unsigned as {verdict}: not promoted, because approvals must be",
        f"   signed here ([verdicts] require_signature = {POLICY}); the report beside it said so;",
        f"   signed with the demo's key ({signed_with}, listed in config/allowed_signers)",
        f"   and processed: promoted to {page}, signed by {reviewer}",
    ]
