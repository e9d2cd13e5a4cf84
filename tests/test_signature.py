"""Signed verdicts checked as ``ssh-keygen -Y verify`` would, with keys and signatures
``ssh-keygen`` makes in the test."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from portfolio_optimiser.context.signature import (
    NAMESPACE,
    SignatureRefused,
    Trust,
    read_trust,
    verify_signature,
)

from .ssh_keys import Key, keygen_verifies, make_key

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Key]:
    folder = tmp_path_factory.mktemp("keys")
    return {
        "kn": make_key(folder, "kn"),
        "ola": make_key(folder, "ola"),
        "rsa": make_key(folder, "rsa", "rsa"),
    }


def _verdict(tmp_path: Path, text: str = '{"id": "c-0123456789abcdef"}\n') -> Path:
    path = tmp_path / "v.json"
    path.write_text(text)
    return path


def _check(verdict: Path, sig: Path, trust: Trust, identity: str = "KN", at: datetime = NOW) -> str:
    proof = verify_signature(
        verdict.read_bytes(), sig.read_bytes(), identity=identity, trust=trust, at=at, name="v.json"
    )
    return proof.principal


def _accepts(
    verdict: Path, sig: Path, allowed: str, identity: str, revoked: Path | None = None
) -> bool:
    """This module's decision on the files ``ssh-keygen`` is asked about."""
    trust = read_trust(allowed, revoked.read_text() if revoked else None)
    try:
        return bool(_check(verdict, sig, trust, identity))
    except SignatureRefused:
        return False


def _refusal(verdict: Path, sig: Path, trust: Trust, identity: str = "KN") -> str:
    with pytest.raises(SignatureRefused) as caught:
        _check(verdict, sig, trust, identity)
    return str(caught.value)


def test_a_good_signature_proves_its_principal_and_key(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict)
    trust = read_trust(f"KN {keys['kn'].public}\n", None)
    proof = verify_signature(
        verdict.read_bytes(), sig.read_bytes(), identity="KN", trust=trust, at=NOW, name="v.json"
    )
    assert (proof.principal, proof.fingerprint) == ("KN", keys["kn"].fingerprint)
    assert proof.key_type == "ssh-ed25519" and proof.namespace == NAMESPACE


def test_an_rsa_key_signs_too(tmp_path: Path, keys: dict[str, Key]) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["rsa"].sign(verdict)
    assert _check(verdict, sig, read_trust(f"KN {keys['rsa'].public}", None)) == "KN"


@pytest.mark.loadbearing
def test_a_signature_for_another_namespace_does_not_count(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict, namespace="git")
    message = _refusal(verdict, sig, read_trust(f"KN {keys['kn'].public}", None))
    assert "namespace 'git'" in message and f"-n {NAMESPACE}" in message


def test_an_edited_file_and_another_files_signature_are_refused(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    trust = read_trust(f"KN {keys['kn'].public}", None)
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict)
    verdict.write_text('{"id": "c-0123456789abcdef", "decision": "approved"}\n')
    assert "edited after it was signed" in _refusal(verdict, sig, trust)
    other = tmp_path / "other" / "w.json"
    other.parent.mkdir()
    other.write_text('{"id": "c-fedcba9876543210"}\n')
    foreign = keys["kn"].sign(other)
    assert "another file's" in _refusal(verdict, foreign, trust)


def test_a_key_the_file_does_not_list_is_refused(tmp_path: Path, keys: dict[str, Key]) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["ola"].sign(verdict)
    message = _refusal(verdict, sig, read_trust(f"KN {keys['kn'].public}", None), "XY")
    assert keys["ola"].fingerprint in message and "does not list" in message


def test_a_reviewer_other_than_the_signer_is_refused(tmp_path: Path, keys: dict[str, Key]) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["ola"].sign(verdict)
    trust = read_trust(f"KN {keys['kn'].public}\nOla {keys['ola'].public}\n", None)
    message = _refusal(verdict, sig, trust, "KN")
    assert "'Ola'" in message and "reviewer is 'KN'" in message
    assert _check(verdict, sig, trust, "Ola") == "Ola"


def test_an_expired_and_a_not_yet_valid_key_are_refused(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict)
    expired = read_trust(f'KN valid-before="20261201Z" {keys["kn"].public}', None)
    assert "expired" in _refusal(verdict, sig, expired)
    early = read_trust(f'KN valid-after="20270101Z" {keys["kn"].public}', None)
    assert "not valid before" in _refusal(verdict, sig, early)
    window = read_trust(
        f'KN valid-after="20261101Z",valid-before="20270101Z" {keys["kn"].public}', None
    )
    assert _check(verdict, sig, window) == "KN"


@pytest.mark.loadbearing
def test_a_revoked_key_is_refused(tmp_path: Path, keys: dict[str, Key]) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict)
    revoked = f"# left in March\n{keys['kn'].path.with_suffix('.pub').read_text()}"
    message = _refusal(verdict, sig, read_trust(f"KN {keys['kn'].public}", revoked))
    assert "revokes" in message and keys["kn"].fingerprint in message
    assert _check(verdict, sig, read_trust(f"KN {keys['kn'].public}", keys["ola"].public)) == "KN"


def test_a_namespaces_option_without_ours_is_refused(tmp_path: Path, keys: dict[str, Key]) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict)
    only_git = read_trust(f'KN namespaces="git" {keys["kn"].public}', None)
    assert "namespaces 'git' only" in _refusal(verdict, sig, only_git)
    both = read_trust(f'KN namespaces="git,{NAMESPACE}" {keys["kn"].public}', None)
    assert _check(verdict, sig, both) == "KN"


def test_principal_patterns_match_as_openssh_does(tmp_path: Path, keys: dict[str, Key]) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict)
    trust = read_trust(f"*@vegvesen.no,!guest@vegvesen.no {keys['kn'].public}", None)
    assert _check(verdict, sig, trust, "kn@vegvesen.no") == "kn@vegvesen.no"
    assert "reviewer is" in _refusal(verdict, sig, trust, "guest@vegvesen.no")
    quoted = read_trust(f'"Kari Nordmann" {keys["kn"].public}', None)
    assert _check(verdict, sig, quoted, "Kari Nordmann") == "Kari Nordmann"


def test_damaged_trust_files_refuse_every_signature_and_name_the_line(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict)
    bad = read_trust(f"KN {keys['kn'].public}\nOla ssh-ed25519 notbase64!\n", None)
    assert "config/allowed_signers line 2" in _refusal(verdict, sig, bad)
    krl = read_trust(f"KN {keys['kn'].public}", "SSHKRL\n\0binary")
    assert "KRL" in _refusal(verdict, sig, krl)
    torn = read_trust(f"KN {keys['kn'].public}", "ssh-ed25519 AAAAC3Nz\n")
    assert "config/revoked_keys line 1" in _refusal(verdict, sig, torn)
    assert "does not exist" in _refusal(verdict, sig, read_trust(None, None))
    assert "not an SSH signature" in _refusal(
        verdict, verdict, read_trust(f"KN {keys['kn'].public}", None)
    )


@pytest.mark.loadbearing
def test_each_decision_agrees_with_ssh_keygen_itself(tmp_path: Path, keys: dict[str, Key]) -> None:
    """The same files, the same moment: ``ssh-keygen -Y verify`` and this module decide alike."""
    verdict = _verdict(tmp_path)
    good = keys["kn"].sign(verdict, to=tmp_path / "good.sig")
    git = keys["kn"].sign(verdict, namespace="git", to=tmp_path / "git.sig")
    ola = keys["ola"].sign(verdict, to=tmp_path / "ola.sig")
    kn = keys["kn"].public
    files = {
        "plain": f"KN {kn}",
        "expired": f'KN valid-before="20261201" {kn}',
        "expired-utc": f'KN valid-before="202612051159Z" {kn}',
        "open-utc": f'KN valid-before="202612051201Z" {kn}',
        "early": f'KN valid-after="20270101" {kn}',
        "git-only": f'KN namespaces="git" {kn}',
        "patterns": f"K*,!KX {kn}",
        "two-lines": f'KN namespaces="git" {kn}\nKN {kn}',
    }
    revoked = tmp_path / "revoked"
    revoked.write_text(keys["kn"].path.with_suffix(".pub").read_text())
    cases = [
        (name, text, sig, identity, None)
        for name, text in files.items()
        for sig in (good, git, ola)
        for identity in ("KN", "KX")
    ] + [("revoked", files["plain"], good, "KN", revoked)]
    for name, text, sig, identity, revoked_file in cases:
        allowed = tmp_path / f"{name}.allowed"
        allowed.write_text(text + "\n")
        ours = _accepts(verdict, sig, text, identity, revoked_file)
        theirs = keygen_verifies(
            allowed, identity, sig, verdict, at="202612051200Z", revoked=revoked_file
        )
        assert ours == theirs, (name, sig.name, identity)


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Key]:
    """A certificate authority, and user keys it certified: for KN, for KN long ago, for OL."""
    folder = tmp_path_factory.mktemp("certs")
    ca = make_key(folder, "ca")
    made = {"ca": ca, "kn": make_key(folder, "kn"), "old": make_key(folder, "old")}
    made["ol"] = make_key(folder, "ol")
    made["kn"].certify(ca, "KN")
    made["old"].certify(ca, "KN", valid="20200101:20210101")
    made["ol"].certify(ca, "OL")
    return made


def test_a_certificate_from_a_listed_authority_proves_its_principal(
    tmp_path: Path, certified: dict[str, Key]
) -> None:
    verdict = _verdict(tmp_path)
    sig = certified["kn"].sign(verdict, with_certificate=True, to=tmp_path / "kn.sig")
    trust = read_trust(f"* cert-authority {certified['ca'].public}", None)
    proof = verify_signature(
        verdict.read_bytes(), sig.read_bytes(), identity="KN", trust=trust, at=NOW, name="v.json"
    )
    assert proof.principal == "KN" and proof.fingerprint == certified["kn"].fingerprint
    assert proof.key_type == "ssh-ed25519-cert-v01@openssh.com"
    assert "reviewer is 'OL'" in _refusal(verdict, sig, trust, "OL")
    plain = read_trust(f"KN {certified['ca'].public}", None)  # the CA, but not as an authority
    assert "does not list as a cert-authority" in _refusal(verdict, sig, plain)
    revoked = read_trust(f"* cert-authority {certified['ca'].public}", certified["ca"].public)
    assert "revokes" in _refusal(verdict, sig, revoked)
    old = certified["old"].sign(verdict, with_certificate=True, to=tmp_path / "old.sig")
    assert "not valid now" in _refusal(verdict, old, trust)
    verdict.write_text('{"id": "c-0123456789abcdef", "edited": true}\n')
    assert "edited after it was signed" in _refusal(verdict, sig, trust)


@pytest.mark.loadbearing
def test_each_certificate_decision_agrees_with_ssh_keygen_itself(
    tmp_path: Path, certified: dict[str, Key]
) -> None:
    verdict = _verdict(tmp_path)
    sigs = {
        who: certified[who].sign(verdict, with_certificate=True, to=tmp_path / f"{who}.sig")
        for who in ("kn", "old", "ol")
    }
    ca = certified["ca"].public
    files = {
        "authority": f"* cert-authority {ca}",
        "named": f"KN cert-authority {ca}",
        "plain": f"KN {ca}",
        "git-only": f'KN cert-authority,namespaces="git" {ca}',
        "expired-line": f'KN cert-authority,valid-before="20261201Z" {ca}',
    }
    for name, text in files.items():
        allowed = tmp_path / f"{name}.allowed"
        allowed.write_text(text + "\n")
        for who, sig in sigs.items():
            for identity in ("KN", "OL"):
                ours = _accepts(verdict, sig, text, identity)
                theirs = keygen_verifies(allowed, identity, sig, verdict, at="202612051200Z")
                assert ours == theirs, (name, who, identity)


@pytest.mark.loadbearing
@pytest.mark.parametrize("bits", [256, 384, 521])
def test_ecdsa_keys_and_certificates_are_decided_as_ssh_keygen_decides(
    tmp_path: Path, bits: int
) -> None:
    """A NIST-curve key (``ssh-keygen -t ecdsa``), plain and certified by an ECDSA authority:
    proven, refused for another reviewer, revoked, and after an edit, as ``ssh-keygen`` says."""
    kn = make_key(tmp_path / "keys", "kn", "ecdsa", bits)
    ca = make_key(tmp_path / "keys", "ca", "ecdsa", bits)
    other = make_key(tmp_path / "keys", "other", "ecdsa", bits)
    kn.certify(ca, "KN")
    verdict = _verdict(tmp_path)
    plain = kn.sign(verdict, to=tmp_path / "plain.sig")
    cert = kn.sign(verdict, with_certificate=True, to=tmp_path / "cert.sig")
    proof = verify_signature(
        verdict.read_bytes(),
        plain.read_bytes(),
        identity="KN",
        trust=read_trust(f"KN {kn.public}", None),
        at=NOW,
        name="v.json",
    )
    assert proof.fingerprint == kn.fingerprint and proof.key_type == f"ecdsa-sha2-nistp{bits}"
    revoked = tmp_path / "revoked"
    revoked.write_text(kn.public + "\n")
    files = {
        "own": f"KN {kn.public}",
        "another": f"KN {other.public}",
        "authority": f"* cert-authority {ca.public}",
    }
    edited = tmp_path / "edited.json"
    edited.write_text('{"id": "c-0123456789abcdef", "decision": "approved"}\n')
    decided = []
    for name, text in files.items():
        allowed = tmp_path / f"{name}.allowed"
        allowed.write_text(text + "\n")
        for sig in (plain, cert):
            for identity, message, revoked_file in [
                ("KN", verdict, None),
                ("OL", verdict, None),
                ("KN", edited, None),
                ("KN", verdict, revoked),
            ]:
                ours = _accepts(message, sig, text, identity, revoked_file)
                theirs = keygen_verifies(
                    allowed, identity, sig, message, at="202612051200Z", revoked=revoked_file
                )
                assert ours == theirs, (name, sig.name, identity, message.name, revoked_file)
                decided.append(ours)
    assert decided.count(True) == 2  # the key on its own line, its certificate by the authority


def _sk_line() -> str:
    """A FIDO key's public line (``sk-ssh-ed25519@openssh.com``), as a hardware token's ``.pub``
    holds it; no signature here can be checked with one."""
    import base64

    def string(value: bytes) -> bytes:
        return len(value).to_bytes(4, "big") + value

    blob = string(b"sk-ssh-ed25519@openssh.com") + string(bytes(range(32))) + string(b"ssh:")
    return f"sk-ssh-ed25519@openssh.com {base64.b64encode(blob).decode()}"


@pytest.mark.loadbearing
def test_a_key_no_signature_can_be_checked_with_is_skipped_and_named_not_blocking(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    """One reviewer's FIDO token listed (or revoked) leaves every other reviewer's approvals
    checked, as ``ssh-keygen`` (which reads such keys) decides them; the line is named."""
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict)
    text = f"OL {_sk_line()}\nKN {keys['kn'].public}"
    revoked = tmp_path / "revoked"
    revoked.write_text(_sk_line() + "\n")
    trust = read_trust(text, revoked.read_text())
    assert not trust.problems and _check(verdict, sig, trust) == "KN"
    assert [s.split(" is skipped")[0] for s in trust.skipped] == [
        "config/allowed_signers line 1",
        "config/revoked_keys line 1",
    ]
    assert "ed25519, ECDSA or RSA" in trust.skipped[0]
    allowed = tmp_path / "allowed"
    allowed.write_text(text + "\n")
    for identity in ("KN", "OL"):
        assert _accepts(verdict, sig, text, identity, revoked) == keygen_verifies(
            allowed, identity, sig, verdict, at="202612051200Z", revoked=revoked
        )


def test_a_trust_file_saved_with_a_byte_order_mark_reads_as_without(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    """Notepad's UTF-8 puts U+FEFF first; read as text, it became part of the first principal
    ('\\ufeffKN'), and KN's own approval was refused as another reviewer's."""
    verdict = _verdict(tmp_path)
    sig = keys["kn"].sign(verdict)
    marked = read_trust(f"\ufeffKN {keys['kn'].public}\r\n", f"\ufeff{keys['ola'].public}\r\n")
    assert _check(verdict, sig, marked) == "KN"
    assert "revokes" in _refusal(verdict, keys["ola"].sign(verdict), read_trust(
        f"KN {keys['ola'].public}", f"\ufeff{keys['ola'].public}"
    ))  # fmt: skip
