"""Text that is safe to show on a terminal or write to a log: no control sequences.

A bundle or verdict can carry ESC sequences (by accident from a copied terminal, or on purpose to
rewrite what a reader sees); none of them reach an output. Newlines and tabs stay.
"""

from __future__ import annotations

import re

__all__ = ["strip_control"]

# CSI / OSC / other ESC sequences first (so their parameters go with them), then any C0/C1 control.
_ESCAPE_SEQUENCE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def strip_control(text: str) -> str:
    return _CONTROL.sub("", _ESCAPE_SEQUENCE.sub("", text))
