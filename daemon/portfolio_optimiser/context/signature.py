"""Signed verdicts: whether an SSH signature proves who approved, as ``ssh-keygen -Y verify`` would.

Decides: which key signed a verdict file's bytes, for which namespace, and which principal of
``config/allowed_signers`` (git's format) that key proves — or the one sentence that says why it
proves nothing. The cryptography is the ``sshsig`` package's (the SSHSIG format of ``ssh-keygen``);
what it leaves to its callers is here: principal patterns, the ``namespaces=``, ``valid-after=``
and ``valid-before=`` options, ``cert-authority`` lines (``ssh_certificate``), and a list of
revoked keys. The namespace is pinned to the
product's own, so a signature made for git or any other protocol never counts.

Fail-closed: an allowed-signers or revocation file with a line it cannot read refuses every
signature until it is fixed (a revocation skipped would let a revoked key through). A line whose
key is of a type no signature here can be checked with (a FIDO ``sk-`` key) is skipped and named
instead: such a key can sign nothing here, so neither its grant nor its revocation can change a
decision, and one reviewer's new token must not stop every other reviewer's approvals. Keys are
ed25519, RSA or ECDSA (``ssh_ecdsa``). Pure: the files' text and the moment of checking are
passed in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from portfolio_optimiser.errors import UserError

if TYPE_CHECKING:
    from sshsig import PublicKey
    from sshsig.sshsig import SshsigSignature

__all__ = [
    "ALLOWED_NAME",
    "NAMESPACE",
    "REVOKED_NAME",
    "Proof",
    "SignatureRefused",
    "Trust",
    "read_trust",
    "sign_command",
    "verify_signature",
]

NAMESPACE: Final = "portfolio-optimiser"
"""The product's own: ``ssh-keygen -Y sign -n portfolio-optimiser``."""
ALLOWED_NAME: Final = "config/allowed_signers"
REVOKED_NAME: Final = "config/revoked_keys"
_KRL_MAGIC: Final = "SSHKRL\n"
KEY_TYPES: Final = "ed25519, ECDSA or RSA"
"""The keys a signature here can be made with."""


class SignatureRefused(UserError):
    """A signature proves nothing; ``str(exc)`` says why and how to sign."""


@dataclass(frozen=True)
class Proof:
    """What a good signature proves: the principal it was checked against, and the key."""

    principal: str
    fingerprint: str
    key_type: str
    namespace: str = NAMESPACE

    def to_json(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "fingerprint": self.fingerprint,
            "key_type": self.key_type,
            "namespace": self.namespace,
        }


@dataclass(frozen=True)
class _Signer:
    line: int
    principals: str
    key: PublicKey
    namespaces: str | None
    valid_after: datetime | None
    valid_before: datetime | None
    cert_authority: bool


@dataclass(frozen=True)
class Trust:
    """The allowed signers and revoked keys, as read; ``problems`` refuse every signature."""

    signers: tuple[_Signer, ...] = ()
    revoked: frozenset[PublicKey] = frozenset()
    problems: tuple[str, ...] = ()
    present: bool = False
    """Whether there is an allowed-signers file at all."""
    skipped: tuple[str, ...] = ()
    """Lines whose key no signature here can be checked with, each a sentence."""


def read_trust(allowed: str | None, revoked: str | None) -> Trust:
    """Read ``config/allowed_signers`` and ``config/revoked_keys`` (None: the file is absent)."""
    allowed, revoked = (_unmarked(text) for text in (allowed, revoked))
    if not (allowed or revoked):
        return Trust(present=allowed is not None)
    _load_keys()
    from sshsig import PublicKey
    from sshsig.allowed_signers import AllowedSigner

    problems: list[str] = []
    skipped: list[str] = []
    signers: list[_Signer] = []
    for number, line in _lines(allowed or ""):
        try:
            signers.append(_signer(number, line))
        except (ValueError, NotImplementedError) as exc:
            if isinstance(exc, NotImplementedError) and _fido(AllowedSigner.parse(line).key_type):
                skipped.append(_unchecked(ALLOWED_NAME, number, exc))
                continue
            problems.append(
                f"{ALLOWED_NAME} line {number}: {_plain(exc)}; write each line as principals, "
                f'options, key, e.g. KE namespaces="{NAMESPACE}" ssh-ed25519 AAAA... (a .pub line)'
            )
    keys: set[PublicKey] = set()
    if revoked is not None and revoked.startswith(_KRL_MAGIC):
        problems.append(
            f"{REVOKED_NAME} is an OpenSSH KRL, which this version does not read; list the "
            "revoked public keys instead, one per line (the lines of their .pub files)"
        )
        revoked = None
    for number, line in _lines(revoked or ""):
        try:
            keys.add(PublicKey.from_openssh_str(line))
        except (ValueError, NotImplementedError) as exc:
            if isinstance(exc, NotImplementedError) and _fido(line.split()[0]):
                skipped.append(_unchecked(REVOKED_NAME, number, exc))
                continue
            problems.append(
                f"{REVOKED_NAME} line {number}: {_plain(exc)}; each line is one public key, as "
                "in its .pub file"
            )
    present = allowed is not None
    return Trust(tuple(signers), frozenset(keys), tuple(problems), present, tuple(skipped))


def _load_keys() -> None:
    """``sshsig`` and ``cryptography`` (7 MB), loaded at the first key read or signature checked
    (a daemon whose workspace has neither holds none of it: its idle target is 120 MB), with the
    ECDSA keys put beside theirs."""
    from .ssh_ecdsa import register

    register()


def _fido(key_type: str) -> bool:
    """A FIDO token's key (``sk-ssh-ed25519@openssh.com``, ``sk-ecdsa-sha2-nistp256@...``, or a
    certificate of one), which this version cannot check a signature with. Only such a line is
    skipped: a damaged line of any other type may be a revocation, and stays a problem."""
    return key_type.startswith("sk-")


def _unchecked(file: str, number: int, exc: BaseException) -> str:
    return (
        f"{file} line {number} is skipped: {_plain(exc)}, and no signature made with such a key "
        f"can be checked here ({KEY_TYPES} keys can)"
    )


def sign_command(file_name: str) -> str:
    """The command a reviewer runs to sign a verdict file (their key's path is theirs to fill in)."""
    return f"ssh-keygen -Y sign -n {NAMESPACE} -f ~/.ssh/id_ed25519 {file_name}"


def verify_signature(
    message: bytes, armored: bytes, *, identity: str, trust: Trust, at: datetime, name: str
) -> Proof:
    """Check that ``armored`` signs ``message`` for the product's namespace with a key
    ``config/allowed_signers`` allows for ``identity`` at ``at``; raise :class:`SignatureRefused`
    with the reason. ``name`` is the signed file's, for the sentences."""
    sig_name = f"{name}.sig"
    how = f"sign it again with `{sign_command(name)}`"
    if not trust.present:
        raise SignatureRefused(
            f"{ALLOWED_NAME} does not exist, so no signature can be checked; ask whoever keeps "
            "the workspace to list each reviewer's public key there (git's allowed_signers format)"
        )
    if trust.problems:
        raise SignatureRefused(
            "; ".join(trust.problems) + "; no signature is checked until these files are fixed"
        )
    _load_keys()
    from sshsig import InvalidSignature, check_signature
    from sshsig.sshsig import SshsigSignature

    from .ssh_certificate import is_certificate

    try:
        outer = SshsigSignature.from_armored(armored)
    except (ValueError, NotImplementedError, UnicodeDecodeError) as exc:
        raise SignatureRefused(
            f"{sig_name} is not an SSH signature ({_plain(exc)}); {how}"
        ) from None
    made_for = outer.namespace.decode("utf-8", "replace")
    if made_for != NAMESPACE:
        raise SignatureRefused(
            f"{sig_name} was made for the namespace {made_for!r}, not {NAMESPACE!r}: a signature "
            f"for git or another tool does not approve a verdict; {how}"
        )
    if is_certificate(outer):
        return _certified(message, outer, identity, trust, at, name)
    try:
        key = check_signature(message, armored, NAMESPACE)
    except InvalidSignature:
        raise SignatureRefused(
            f"{sig_name} does not sign the bytes of {name} as they are now: the file was edited "
            f"after it was signed, or the signature is another file's; {how}"
        ) from None
    except NotImplementedError as exc:
        raise SignatureRefused(f"{sig_name}: {_plain(exc)}; sign with an {KEY_TYPES} key") from None
    fingerprint = key.sha256_str()
    if key in trust.revoked:
        raise SignatureRefused(
            f"{sig_name} was made with the key {fingerprint}, which {REVOKED_NAME} revokes; "
            "sign with your current key"
        )
    return _allowed(key, fingerprint, identity, trust, at, sig_name)


def _certified(
    message: bytes, outer: SshsigSignature, identity: str, trust: Trust, at: datetime, name: str
) -> Proof:
    """A signature made with a certificate: its authority must be a ``cert-authority`` line for
    the reviewer, and the certificate a user's, issued for the reviewer and valid now."""
    from sshsig import InvalidSignature

    from .ssh_certificate import open_certificate

    sig_name = f"{name}.sig"
    try:
        cert = open_certificate(outer, message, NAMESPACE)
    except InvalidSignature:
        raise SignatureRefused(
            f"{sig_name} does not sign the bytes of {name} as they are now: the file was edited "
            f"after it was signed, or the signature is another file's; sign it again"
        ) from None
    except ValueError as exc:
        raise SignatureRefused(
            f"{sig_name}: {exc}; sign with your plain key, or ask for a new certificate"
        ) from None
    fingerprint, authority = cert.key.sha256_str(), cert.authority.sha256_str()
    revoked = next((k for k in (cert.key, cert.authority) if k in trust.revoked), None)
    if revoked is not None:
        raise SignatureRefused(
            f"{sig_name} was made with a certificate whose key {revoked.sha256_str()} "
            f"{REVOKED_NAME} revokes; sign with your current key"
        )
    lines = [s for s in trust.signers if s.cert_authority and s.key == cert.authority]
    if not lines:
        raise SignatureRefused(
            f"{sig_name} was made with a certificate issued by {authority}, which "
            f"{ALLOWED_NAME} does not list as a cert-authority; ask whoever keeps the workspace"
        )
    named = [s for s in lines if _matches(identity, s.principals)]
    if not named or identity not in cert.principals:
        raise SignatureRefused(
            f"{sig_name} was made with a certificate for {', '.join(map(repr, cert.principals))} "
            f"({fingerprint}), but the verdict's reviewer is {identity!r}; the reviewer is "
            "whoever signs: write the signer's name in reviewer, or sign with your own key"
        )
    if (
        not cert.user
        or not cert.valid_after <= at
        or (cert.valid_before is not None and at >= cert.valid_before)
    ):
        until = cert.valid_before.isoformat() if cert.valid_before else "ever"
        raise SignatureRefused(
            f"{sig_name} was made with a certificate not valid now (a user certificate from "
            f"{cert.valid_after.isoformat()} until {until} is needed); ask for a new one"
        )
    reasons = [r for s in named if (r := _refusal(s, at)) is not None]
    if len(reasons) == len(named):
        raise SignatureRefused(f"{sig_name} was made with a certificate, but {reasons[0]}")
    return Proof(identity, fingerprint, cert.key_type)


def _allowed(
    key: PublicKey, fingerprint: str, identity: str, trust: Trust, at: datetime, sig_name: str
) -> Proof:
    """The first line for this key and principal whose options allow it, as ``ssh-keygen``
    takes them; else the reason of the first line that named them both."""
    own = [s for s in trust.signers if s.key == key and not s.cert_authority]
    if not own:
        raise SignatureRefused(
            f"{sig_name} was made with the key {fingerprint}, which {ALLOWED_NAME} does not "
            f"list; ask whoever keeps the workspace to add it for {identity!r}"
        )
    named = [s for s in own if _matches(identity, s.principals)]
    if not named:
        listed = ", ".join(sorted({repr(s.principals) for s in own}))
        raise SignatureRefused(
            f"{sig_name} was made with the key of {listed} ({fingerprint}), but the verdict's "
            f"reviewer is {identity!r}; the reviewer is whoever signs: write the signer's name "
            "in reviewer, or sign with your own key"
        )
    reasons = []
    for signer in named:
        reason = _refusal(signer, at)
        if reason is None:
            return Proof(identity, fingerprint, key.algo_name)
        reasons.append(f"{ALLOWED_NAME} line {signer.line}: {reason}")
    raise SignatureRefused(f"{sig_name} was made with the key {fingerprint}, but " + reasons[0])


def _refusal(signer: _Signer, at: datetime) -> str | None:
    if signer.namespaces is not None and not _matches(NAMESPACE, signer.namespaces):
        return (
            f"the key is allowed for the namespaces {signer.namespaces!r} only; add "
            f"{NAMESPACE} to its namespaces option"
        )
    if signer.valid_after is not None and at < signer.valid_after:
        return f"the key is not valid before {signer.valid_after.isoformat()} (valid-after)"
    if signer.valid_before is not None and at > signer.valid_before:
        return (
            f"the key expired at {signer.valid_before.isoformat()} (valid-before); sign with a "
            "key the file allows now"
        )
    return None


def _signer(number: int, line: str) -> _Signer:
    from sshsig import PublicKey
    from sshsig.allowed_signers import AllowedSigner

    entry = AllowedSigner.parse(line)
    key = PublicKey.from_openssh_str(f"{entry.key_type} {entry.base64_key}")
    options = entry.options or {}
    return _Signer(
        line=number,
        principals=entry.principals,
        key=key,
        namespaces=options.get("namespaces"),
        valid_after=_moment(options["valid-after"]) if "valid-after" in options else None,
        valid_before=_moment(options["valid-before"]) if "valid-before" in options else None,
        cert_authority="cert-authority" in options,
    )


_MOMENT: Final = re.compile(r"^(\d{8})(\d{4})?(\d{2})?(Z)?$")


def _moment(text: str) -> datetime:
    """``YYYYMMDD[HHMM[SS]][Z]``, as OpenSSH reads it: local time unless it ends with Z."""
    found = _MOMENT.match(text)
    if found is None or (found.group(3) and not found.group(2)):
        raise ValueError(
            f"{text!r} is not a time; write YYYYMMDD, YYYYMMDDHHMM or YYYYMMDDHHMMSS, with Z for UTC"
        )
    digits = found.group(1) + (found.group(2) or "0000") + (found.group(3) or "00")
    moment = datetime.strptime(digits, "%Y%m%d%H%M%S")
    return moment.replace(tzinfo=UTC) if found.group(4) else moment.astimezone()


def _matches(name: str, patterns: str) -> bool:
    """OpenSSH's pattern list: comma-separated, ``*`` and ``?``, a ``!`` negates and wins."""
    matched = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        if _glob(pattern[1:] if negated else pattern).fullmatch(name):
            if negated:
                return False
            matched = True
    return matched


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."), re.DOTALL)


def _unmarked(text: str | None) -> str | None:
    """A trust file's text without the byte-order mark some Windows editors put first (it would
    be read as part of the first line's principal)."""
    return None if text is None else text.removeprefix("\ufeff")


def _lines(text: str) -> Iterable[tuple[int, str]]:
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            yield number, line


def _plain(exc: BaseException) -> str:
    return str(exc).rstrip(".") or type(exc).__name__
