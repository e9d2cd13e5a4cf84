"""Text that is safe to show on a terminal or write to a log: no control sequences.

A bundle, a verdict or a model's answer can carry ESC sequences (by accident from a copied terminal,
or on purpose to rewrite what a reader sees); none of them reach an output, a record or a log.
Newlines and tabs stay; every other C0/C1 control character, DEL, and the bidirectional overrides
that can reorder what a reader sees (U+202A–U+202E, U+2066–U+2069) go.
"""

from __future__ import annotations

import re

__all__ = ["strip_control"]

# Whole sequences first, so their parameters go with them (ECMA-48):
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC … BEL or ST (window titles, hyperlinks)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC … ST
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI (colours, cursor movement, erase)
    r"|\x1b[@-Z\\-_]"  # other 7-bit C1 escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def strip_control(text: str) -> str:
    return _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", text))
