"""``demo``: the embedded default through the daemon's own path, in a workspace it leaves behind.

Four passes of ``once`` over one workspace, each fed as a user would feed it:

1. the example portfolio is dropped into ``inbox/projects/`` (a staged copy, then a rename) and
   processed: reports, charts, verdict templates and ``spend.json`` in ``outbox/``;
2. the expert persona (``shared/skills/expert-reviewer``, read at call time) fills in the verdict
   template of the one candidate its example verdict judges and saves it into ``inbox/verdicts/``;
   processing it promotes the approval into ``bundles/wiki/verdicts/`` (``--signed``: it waits,
   unsigned, with a report, until the persona signs it with a key the demo makes);
3. a second school of the same type design (``examples/learning/nordvik-school``), whose kuttliste
   does not list the approved measure, is dropped and processed: the approval is proposed there
   as a learned measure, and the persona's marker reaches that run's prompt (``provenance.json``
   keeps the learned block the prompt carried); with it, the judged school revised (a note
   added), whose report shows the decided candidate as decided and asks for it no more;
4. the same school in a control workspace with an empty wiki (``.demo-control/``): no marker.

Whatever the configuration admits is consulted (a model when one is configured); without one the
runs are local, and the demo says so. It proves the plumbing and the data flow, not model quality.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser._atomic import publish_atomic
from portfolio_optimiser.config import Config
from portfolio_optimiser.errors import UserError
from portfolio_optimiser.invocation import command
from portfolio_optimiser.outputs.proposals import ProposedCandidate, read_proposals
from portfolio_optimiser.outputs.report import format_nok
from portfolio_optimiser.outputs.templates import dump_json, template_name
from portfolio_optimiser.persona import load_persona_example, persona_marker
from portfolio_optimiser.pipeline.run import ClientFactory, default_client_factory
from portfolio_optimiser.resources import commons_dir

from .demo_signing import DemoSigner, promotion_lines
from .once import run_once
from .processor import ItemResult
from .workspace import Workspace

__all__ = ["DemoFailed", "DemoReport", "demo_folder", "render_demo", "run_demo"]

LEARNER: Final = "nordvik-school"
"""The learning run's bundle: the same codes as the school the persona judges, another planner's
kuttliste without the approved measure (a second project, not a revised copy: identical content
would rightly be a duplicate to the daemon, and a new project shows what the learning finds)."""
CONTROL: Final = ".demo-control"
_DONE: Final = frozenset({"done", "ingested"})
_VERDICT_FIELDS: Final = (
    "decision",
    "rationale",
    "reviewer",
    "realization_rate",
    "adjusted_saving_nok",
    "decided_at",
)


class DemoFailed(UserError):
    """A pass of the demo did not end as the daemon should have ended it."""


@dataclass(frozen=True)
class Run:
    """One published run, read back from its own files."""

    project_id: str
    folder: Path
    provenance: Mapping[str, Any]
    candidates: tuple[ProposedCandidate, ...]

    @property
    def report(self) -> Path:
        return self.folder / "report.md"

    @property
    def learned(self) -> str:
        return str(self.provenance.get("learned") or "")

    @classmethod
    def read(cls, folder: Path) -> Run:
        provenance = json.loads((folder / "provenance.json").read_text("utf-8"))
        return cls(
            project_id=str(provenance["project_id"]),
            folder=folder,
            provenance=provenance,
            candidates=read_proposals(folder / "proposals.json").candidates,
        )


@dataclass(frozen=True)
class DemoReport:
    workspace: Path
    marker: str
    portfolio: tuple[Run, ...]
    verdict_file: Path
    verdict: Mapping[str, Any]
    promoted_page: Path
    learning: Run
    revision: Run
    """The judged project's revised version: its decided candidate shown, not asked again."""
    control: Run
    log: Path
    signed_with: str | None = None
    """``--signed``: the demo key's fingerprint, which proved the persona."""
    unsigned: str = ""  # --signed: what the daemon said of the verdict before it was signed

    @property
    def runs(self) -> tuple[Run, ...]:
        return (*self.portfolio, self.learning, self.revision, self.control)

    @property
    def marker_reached_learning_run(self) -> bool:
        return self.marker in self.learning.learned

    @property
    def marker_in_control(self) -> bool:
        return self.marker in self.control.learned

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for r in self.runs for m in r.provenance.get("models", ())))

    @property
    def proven(self) -> bool:
        return self.marker_reached_learning_run and not self.marker_in_control


def demo_folder(into: Path | None, *, cwd: Path) -> Path:
    """``into`` when it is new or empty; else a new ``portfolio-optimiser-demo[-N]`` in ``cwd``.

    A folder with anything in it is refused: the first pass must start from an empty wiki, and the
    demo would add example projects and an expert's approval to someone's real workspace.
    """
    if into is not None:
        if into.exists() and (not into.is_dir() or any(into.iterdir())):
            raise DemoFailed(
                f"{into} is not an empty folder; give demo a new or empty one (it adds the example "
                "projects and an expert's approval, and its first run must start from an empty wiki)"
            )
        return into
    for n in range(1, 1000):
        candidate = cwd / ("portfolio-optimiser-demo" + (f"-{n}" if n > 1 else ""))
        if not candidate.exists():
            return candidate
    raise DemoFailed(f"{cwd} already holds 999 demo folders; remove some or pass --into DIR")


def drop(source: Path, inbox: Path) -> Path:
    """Put a bundle into an inbox as a careful user does: copy beside it, then rename in."""
    target = inbox / source.name
    staging = inbox / f".{source.name}.copying"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    staging.rename(target)
    return target


REVISION_NOTE: Final = (
    "---\ntype: note\ntitle: Revision 2\n---\n\n# Revision 2\n\nThe estimate after the "
    "forprosjekt review: the site plan changed, the figures did not.\n"
)


def drop_revised(source: Path, inbox: Path) -> Path:
    """The bundle again as its planner revises it (a note added), dropped as ``drop`` does."""
    target = inbox / source.name
    staging = inbox / f".{source.name}.copying"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    (staging / "context").mkdir(exist_ok=True)
    (staging / "context" / "revision-2.md").write_text(REVISION_NOTE, "utf-8")
    staging.rename(target)
    return target


def fill_template(template: Mapping[str, Any], example: Mapping[str, Any]) -> dict[str, Any]:
    """The persona's answer: its example verdict's decision fields written into the template.

    The template keeps what the daemon wrote (``$schema``, id, the candidate's summary); only the
    fields an expert fills in are taken from the persona.
    """
    filled = dict(template)
    for field in _VERDICT_FIELDS:
        if field in example:
            filled[field] = example[field]
    return filled


def _pass(
    workspace: Workspace,
    config: Config,
    log: Any,
    client_factory: ClientFactory,
    environ: dict[str, str] | None,
    *,
    what: str,
    expected: frozenset[str],
) -> list[ItemResult]:
    report = run_once(
        workspace, config, log=log, client_factory=client_factory, environ=environ, wait=True
    )
    wrong = [r for r in report.results if r.state not in expected]
    if wrong or report.pending:
        said = "; ".join(f"{r.name}: {r.state} {r.message}".strip() for r in wrong)
        raise DemoFailed(
            f"the demo's {what} did not end as it should ({said or 'inputs still changing'}); "
            f"see {workspace.outbox / 'failed'} and the log"
        )
    return list(report.results)


def _bundle_runs(results: list[ItemResult]) -> tuple[Run, ...]:
    return tuple(Run.read(r.output) for r in results if r.kind == "bundle" and r.output)


def run_demo(
    root: Path,
    config: Config,
    *,
    log: Any,
    log_file: Path,
    client_factory: ClientFactory = default_client_factory,
    environ: dict[str, str] | None = None,
    progress: Callable[[str], None] = lambda _line: None,
    signed: bool = False,
) -> DemoReport:
    """The four passes in ``root`` (created); raises ``DemoFailed`` when one ends otherwise.
    ``signed``: approvals must be signed, and the persona signs with a key the demo makes."""
    examples = commons_dir() / "examples"
    example, raw = load_persona_example()
    marker = persona_marker(example)
    workspace = Workspace.at(root)
    workspace.ensure()
    if signed:
        config = DemoSigner.config(config)

    def once(ws: Workspace, what: str, expected: frozenset[str] = _DONE) -> list[ItemResult]:
        return _pass(ws, config, log, client_factory, environ, what=what, expected=expected)

    progress("1/4 dropping the example portfolio into inbox/projects/ and processing it")
    for source in sorted(p for p in (examples / "portfolio").iterdir() if p.is_dir()):
        drop(source, workspace.inbox_projects)
    portfolio = _bundle_runs(once(workspace, "first pass (the example portfolio)"))

    progress("2/4 the expert persona fills in one verdict template; processing it")
    template_file = next(
        (
            r.folder / "verdicts" / template_name(example.id)
            for r in portfolio
            if (r.folder / "verdicts" / template_name(example.id)).is_file()
        ),
        None,
    )
    if template_file is None:
        raise DemoFailed(
            f"no run wrote a verdict template for {example.id}, the candidate the persona's example "
            "verdict judges; the example verdict and the example portfolio have drifted apart"
        )
    template = json.loads(template_file.read_text("utf-8"))
    filled = fill_template(template, json.loads(raw))
    verdict_file = workspace.inbox_verdicts / template_name(example.id)
    publish_atomic(verdict_file, dump_json(filled))  # as an editor saves it
    signer, unsigned = None, ""
    if signed:
        signer = DemoSigner(workspace, str(filled.get("reviewer") or ""))
        waited = once(workspace, "unsigned pass (the verdict)", frozenset({"reported"}))
        unsigned = next((r.message for r in waited if r.kind == "verdict"), "")
        if not unsigned or (workspace.wiki / "verdicts" / f"{example.id}.md").exists():
            raise DemoFailed(f"{verdict_file.name} was promoted although it was not signed")
        signer.sign(verdict_file)
    ingested = [r for r in once(workspace, "second pass (the verdict)") if r.kind == "verdict"]
    page = next((r.output for r in ingested if r.output), None)
    if page is None:
        raise DemoFailed(f"{verdict_file.name} was read but nothing was promoted into the wiki")

    judged = str(template.get("candidate", {}).get("project_id", ""))
    progress(
        f"3/4 dropping {LEARNER}, which learns from that verdict, and a revised {judged}; "
        "processing them"
    )
    learner = examples / "learning" / LEARNER
    drop(learner, workspace.inbox_projects)
    drop_revised(examples / "portfolio" / judged, workspace.inbox_projects)
    runs = _bundle_runs(once(workspace, f"third pass ({LEARNER} and {judged} revised)"))
    learning = next(r for r in runs if r.project_id == LEARNER)
    revision = next(r for r in runs if r.project_id == judged)
    if (revision.folder / "verdicts" / template_name(example.id)).exists():
        raise DemoFailed(
            f"the revised {judged} asked for a verdict on {example.id} again, although the expert "
            "decided it in the second pass"
        )

    progress(f"4/4 the same bundle in a control workspace with an empty wiki ({CONTROL}/)")
    control_ws = Workspace.at(root / CONTROL)
    control_ws.ensure()
    drop(learner, control_ws.inbox_projects)
    (control,) = _bundle_runs(once(control_ws, "control pass"))
    return DemoReport(
        workspace=workspace.root,
        marker=marker,
        portfolio=portfolio,
        verdict_file=verdict_file,
        verdict=filled,
        promoted_page=page,
        learning=learning,
        revision=revision,
        control=control,
        log=log_file,
        signed_with=signer.fingerprint if signer is not None else None,
        unsigned=unsigned,
    )


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def render_demo(report: DemoReport) -> str:
    root = report.workspace
    example = report.verdict
    candidate = example.get("candidate", {})
    learned = [c for c in report.learning.candidates if c.origin.startswith("verdict:")]
    lines = [
        "portfolio-optimiser demo: the example portfolio, through the daemon's own path",
        "",
        f"Workspace: {root}",
        "",
        f"1. The example portfolio went into inbox/projects/ and was processed ({len(report.portfolio)} projects):",
    ]
    for run in report.portfolio:
        validated = sum(1 for c in run.candidates if c.validated)
        lines.append(
            f"   {run.project_id}: {len(run.candidates)} candidates, {validated} validated  → {_rel(run.report, root)}"
        )
    lines += [
        "",
        f"2. The expert persona ({example.get('reviewer')}) filled in the verdict template of {example.get('id')}",
        f"   ({candidate.get('title')}, {candidate.get('project_id')}): {example.get('decision')}, "
        f"{float(example.get('realization_rate') or 1):.0%} expected to be realised;",
        *promotion_lines(
            _rel(report.verdict_file, root),
            _rel(report.promoted_page, root),
            signed_with=report.signed_with,
            reviewer=str(example.get("reviewer")),
        ),
        "",
        f"3. {LEARNER}, a second school of the same type design whose kuttliste does not list that",
        f"   measure, went into the inbox and was processed → {_rel(report.learning.report, root)}",
    ]
    for c in learned:
        lines.append(
            f"   learned from the verdict: {c.title}, "
            f"{format_nok(c.claimed_saving_nok)} NOK, validator {c.validator}"
        )
    when = str(example.get("decided_at") or "")[:10]
    lines += [
        f"   {report.revision.project_id} again, revised (a note added): {example.get('id')} is shown as "
        f"{example.get('decision')} by {example.get('reviewer')}{f' on {when}' if when else ''}, and no",
        f"   template asks for it again → {_rel(report.revision.report, root)}",
        f"   the expert's lesson (marker {report.marker}) reached {LEARNER}'s prompt: "
        f'{"yes" if report.marker_reached_learning_run else "NO"} (its report: "What experts taught this run")',
        "",
        f"4. Control, the same bundle in a workspace with an empty wiki ({CONTROL}/): marker in its prompt: "
        f"{'YES' if report.marker_in_control else 'no'}",
        "",
    ]
    if report.models:
        lines.append(f"Models consulted: {', '.join(report.models)}.")
    else:
        lines.append(
            "The runs were local: no model is configured, so the planner's kuttliste and the learned"
        )
        lines.append(
            "measures were proposed by the local rules and checked by the validator and the local review."
        )
        lines.append('Configure a model (README, "Models") and the same path consults it.')
    lines += [
        "What this shows: the daemon's whole path, bundle → validator → report and template →",
        "verdict → wiki → the next project's prompt and candidates. It does not show how well a",
        "model proposes or judges.",
        f"The daemon's log of these passes: {report.log}",
        "",
        "To go on, start the daemon on this workspace (Next, below), then fill in a template from",
        "outbox/runs/*/*/verdicts/ and save it into inbox/verdicts/, or drop your own bundle into",
        "inbox/projects/; each is processed as it arrives.",
        "",
        f"Open first: {report.learning.report}",
        f"Next: {command('run', '--workspace', str(root))}",
    ]
    return "\n".join(lines)
