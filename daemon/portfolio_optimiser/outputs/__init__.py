"""The RAW layer: what one project run leaves in ``outbox/runs/<project-id>/<run-id>/`` (DESIGN §3).

Decides nothing about candidates: it renders a finished run (``RunResult``) for machines
(``proposals.json``, ``provenance.json``; ``proposals.json`` is read back through
:func:`read_proposals`), for people (``report.md`` and its chart) and for experts
(verdict templates), redacts every string on the way out, and publishes the folder atomically. It
imports no model framework: the pipeline's types are used for annotations only.
"""

from __future__ import annotations

from .folders import OutputExists
from .proposals import Proposals, ProposalsError, ProposedCandidate, read_proposals
from .report import Redactor, format_nok, render_report, render_savings_svg, savings_by_code
from .templates import template_for, template_name
from .writer import build_run_files, schema_ref_for, write_run_outputs

__all__ = [
    "OutputExists",
    "Proposals",
    "ProposalsError",
    "ProposedCandidate",
    "Redactor",
    "build_run_files",
    "format_nok",
    "read_proposals",
    "render_report",
    "render_savings_svg",
    "savings_by_code",
    "schema_ref_for",
    "template_for",
    "template_name",
    "write_run_outputs",
]
