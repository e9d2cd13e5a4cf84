"""Redaction: what is stripped from every string before it is written to a record, an output or a log.

Order matters and is part of the contract: terminal control sequences and control characters go
first (so an escape sequence cannot split a secret into pieces no pattern sees), then the secret
shapes of a small ordered table, narrower names before broader ones. Each match becomes
``[redacted:<kind>]`` and the kinds are reported, never the values. Text in which a private-key
header announces a key body is refused outright: redacting the header would leave the key.

One table, every caller: the record writer, the output writers and the log processor use
:func:`scrub`. Tests build their secrets at run time, so no committed file carries one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.errors import UserError

__all__ = [
    "SECRET_SHAPES",
    "RedactionRefused",
    "Scrubbed",
    "redact_event",
    "safe_text",
    "scrub",
    "scrub_value",
]


class RedactionRefused(UserError, ValueError):
    """The text carries a secret that redaction cannot make safe; nothing is written."""


@dataclass(frozen=True)
class Scrubbed:
    text: str
    kinds: tuple[str, ...] = ()


# A vendor key's random body: mixed case and digits, never a slug's lower-case words (a project
# named "ntnu-ansk-24-0032-k5-ventilasjon" holds "sk-24-0032-k5-ventilasjon", which a bare
# "sk-" shape took for a key, corrupting the run's ids). A key glued to the word before it
# stays a key: stripping an escape sequence can glue them.
_KEY_BODY: Final = r"(?=[A-Za-z0-9_-]*[A-Z])(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]"

# (kind, pattern). Order: narrower vendor shapes before the broad ones that would also match them.
SECRET_SHAPES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("anthropic-key", re.compile(rf"sk-ant-{_KEY_BODY}{{16,}}")),
    ("openai-key", re.compile(rf"sk-(?:proj-|svcacct-|admin-)?{_KEY_BODY}{{20,}}")),
    ("github-pat", re.compile(r"github_pat_[A-Za-z0-9_]{20,}")),
    ("github-token", re.compile(r"gh[pousr]_[A-Za-z0-9_]{20,}")),
    ("aws-access-key-id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}")),
    ("google-api-key", re.compile(r"AIza[0-9A-Za-z_-]{35}")),
    ("slack-token", re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}")),
    ("stripe-key", re.compile(r"\b[rsp]k_(?:live|test)_[A-Za-z0-9]{16,}")),
    ("private-key-header", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("bearer-token", re.compile(r"\b[Bb]earer\s+[A-Za-z0-9._~+/=-]{20,}")),
)
# Every shape at once, to pass over a text that has none in one scan rather than one a shape (most
# texts have none; a record's strings were scanned ten times each, a third of its cost).
_ANY_SHAPE: Final = re.compile(
    "|".join(f"(?:{pattern.pattern})" for _kind, pattern in SECRET_SHAPES)
)
# name = value, keeping the name: password=…, "api_key": "…", AZURE_OPENAI_API_KEY=…
# A name starts where its run of name characters starts: a match from inside a run is also one
# from the run's start, which comes first, so the look-behind changes no match. Without it every
# position of a long run was tried, each scanning to the run's end (20 000 letters: 25 s a scrub).
_ASSIGNMENT: Final = re.compile(
    r"(?<![A-Za-z0-9_.-])"
    r"(?P<name>[A-Za-z0-9_.-]*(?:api[-_]?key|access[-_]?token|auth[-_]?token|secret[-_]?key|"
    r"client[-_]?secret|password|passwd|pwd)[A-Za-z0-9_]*)"
    r"(?P<sep>[\"']?\s*[:=]\s*[\"']?)"
    r"(?P<value>[^\s\"',;]{8,})",
    re.IGNORECASE,
)
# A header followed, within a few lines, by key material: PEM armour lines, an encrypted key's
# Proc-Type/DEK-Info headers, or a JSON-escaped "\n" before the body all count. Checked line by
# line rather than by one regex: nested repetition there backtracks exponentially on crafted text.
_KEY_HEADER: Final = re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_HEADER_FIELD: Final = re.compile(r"[A-Za-z][A-Za-z-]*:")
_KEY_MATERIAL: Final = re.compile(r"[A-Za-z0-9+/=]{16,}")


def _announces_a_key_body(text: str) -> bool:
    for header in _KEY_HEADER.finditer(text):
        following = text[header.end() : header.end() + 2000]
        for escaped in ("\\r\\n", "\\n", "\\r", "\r\n", "\r"):  # JSON-escaped and CR line ends
            following = following.replace(escaped, "\n")
        for line in following.split("\n")[:8]:
            stripped = line.strip()
            if not stripped or _HEADER_FIELD.match(stripped):
                continue  # blank lines and Proc-Type/DEK-Info style headers come before the body
            if _KEY_MATERIAL.match(stripped):
                return True
            break
    return False


REMEMBERED_CHARS: Final = 16_384
"""Texts up to this long are scrubbed once and remembered (``scrub``)."""


def scrub(text: str) -> Scrubbed:
    """Strip control sequences, then secret shapes. Raises :class:`RedactionRefused`.

    A run scrubs the same texts again and again — the instructions and the conversation so far
    at every call, an advisor's id in every record — about 900 times a run, four in five of them
    a text already scrubbed: a text up to ``REMEMBERED_CHARS`` long is scrubbed once."""
    return _remembered(text) if len(text) <= REMEMBERED_CHARS else _scrub(text)


def _scrub(text: str) -> Scrubbed:
    clean = strip_control(text)
    kinds: list[str] = []
    if clean != text:
        kinds.append("control-sequence")
    if _announces_a_key_body(clean):
        raise RedactionRefused(
            "the text carries a private key (a PRIVATE KEY header followed by its body); "
            "remove the key before it is recorded"
        )
    if _ANY_SHAPE.search(clean) is not None:
        for kind, pattern in SECRET_SHAPES:
            clean, count = pattern.subn(f"[redacted:{kind}]", clean)
            if count:
                kinds.append(kind)

    def _keep_name(match: re.Match[str]) -> str:
        if match.group("value").startswith("[redacted:"):
            return match.group(0)
        return f"{match.group('name')}{match.group('sep')}[redacted:assignment]"

    if ":" in clean or "=" in clean:  # no assignment without its sign
        clean, count = _ASSIGNMENT.subn(_keep_name, clean)
        if count and "[redacted:assignment]" in clean:
            kinds.append("assignment")
    return Scrubbed(clean, tuple(kinds))


_remembered = functools.lru_cache(maxsize=512)(_scrub)


def scrub_value(value: Any, kinds: set[str]) -> Any:
    """Scrub every string inside a JSON-like value, collecting the kinds stripped."""
    if isinstance(value, str):
        result = scrub(value)
        kinds.update(result.kinds)
        return result.text
    if isinstance(value, Mapping):
        return {scrub_value(k, kinds): scrub_value(v, kinds) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(v, kinds) for v in value]
    return value


def redact_event(
    _logger: object, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """A structlog processor: put it last before the renderer, after anything that adds text."""
    kinds: set[str] = set()
    for key, value in list(event.items()):
        try:
            event[key] = (
                scrub_value(value, kinds)
                if isinstance(value, str | Mapping | list | tuple)
                else value
            )
        except RedactionRefused:
            event[key] = "[redacted:private-key]"
    return event


def safe_text(text: str) -> str:
    """``scrub`` for text written for people (reports, notes): a refused secret is withheld whole."""
    try:
        return scrub(text).text
    except RedactionRefused:
        return "[withheld: the text carried a private key]"
