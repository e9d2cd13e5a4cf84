"""The two kinds of claim a job desk runs, and what each decision does to its input.

Decides: where an input is held while its job runs, and what becomes of it when the job is not
run (a duplicate, a refusal, a wait) or fails (set aside, put off, a bug). An **inbox claim** is
a bundle renamed into the claim folder (so it is processed once), given its run identity, which
the claim keeps; set aside, it moves to ``outbox/failed/`` with a report saying what, where and
how to fix; put off, it waits in its claimed place with back-off. A **rerun claim** is an
ingested project the portfolio moved under; it stays where it is whatever happens, and only its
identity is given up or put off. The decisions themselves are ``decide``'s.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.config import Config
from portfolio_optimiser.reasoning.redaction import safe_text

from .archive import Reading, extract_bundle, import_folder
from .claim import ClaimError, content_digest, original_name, release
from .decide import ClaimView
from .filters import InboxFilter
from .job import Job, Stage
from .ledger import Ledger, next_backoff_s
from .outcomes import UNDER_WAY, Cost, ItemResult, cost_of
from .portfolio import Portfolio
from .stability import snapshot
from .stamps import iso
from .workspace import Workspace

__all__ = ["Claim", "Floor", "InboxClaim", "RerunClaim", "due_retries", "next_retry", "take_claim"]


@dataclass
class Floor:
    """What every claim's effects touch: the workspace, the ledger, the log, and the sentences
    ``status`` shows for what waits."""

    workspace: Workspace
    config: Config
    ledger: Ledger
    clock: Callable[[], float]
    log: Any
    waiting: dict[str, str]
    """Inputs left to wait, by name, with the sentence that says why (``status`` shows them)."""
    retry_due_at: float | None = None
    """When the next back-off runs out (None: read it from the ledger at the next look)."""

    def now(self) -> str:
        return iso(self.clock())


@dataclass(frozen=True)
class InboxClaim:
    floor: Floor
    claimed: Path
    name: str
    bundle: Path
    """The folder the pipeline reads (an archive's or an estimate's is unpacked beside it)."""
    content: str
    identity: str
    references: str
    """The reference snapshot its identity was computed against (JSON; empty: remembered)."""
    kind = "bundle"

    def view(self) -> ClaimView:
        return ClaimView(self.identity, str(self.claimed), self.floor.config.budget.run_tokens)

    def new_job(self, first_seen: str) -> Job:
        # Before its run, which may take minutes: the operator sees the bundle was taken.
        self.floor.log.info("bundle taken", bundle=self.name, identity=self.identity[:12])
        return Job(
            self.identity,
            self.name,
            str(self.claimed),
            str(self.bundle),
            first_seen,
            rerun=False,
            content=self.content,
            references=self.references,
        )

    def take_over(self, job: Job) -> Job:
        return replace(job, claimed=str(self.claimed), bundle=str(self.bundle))

    def duplicate(self, first: str) -> ItemResult:
        floor = self.floor
        shutil.rmtree(_unpacked(self.claimed), ignore_errors=True)
        destination = release(self.claimed, floor.workspace.duplicates / self.name)
        publish_text(
            destination.with_name(destination.name + ".duplicate.txt"),
            safe_text(
                f"{self.name} has the same content as a bundle already run ({first}); "
                "it was not run again and nothing was charged."
            )
            + "\n",
        )
        floor.log.info("duplicate bundle", bundle=self.name, first=first)
        return self.left(ItemResult(self.name, "bundle", "duplicate", f"identical to {first}"))

    def refused(self, reason: str) -> ItemResult:
        return self.left(set_aside(self.floor, self.claimed, self.name, self.identity, reason))

    def wait(self, refusal: str) -> ItemResult:
        """Another machine took what was left since the bundle was admitted: it goes back to the
        inbox, unclaimed and not failed, until the budget funds it."""
        shutil.rmtree(_unpacked(self.claimed), ignore_errors=True)
        release(self.claimed, self.floor.workspace.inbox_projects / self.name)
        self.floor.waiting[self.name] = refusal
        self.floor.log.info("bundle waits", bundle=self.name, reason=refusal)
        return self.left(ItemResult(self.name, "bundle", "waiting", refusal))

    def failed(self, cost: Cost, exc: BaseException) -> ItemResult:
        return self.left(costed(self.floor, self.claimed, self.name, self.identity, cost, exc))

    def left(self, result: ItemResult) -> ItemResult:
        return _left(self.floor, self.claimed, result)


@dataclass(frozen=True)
class RerunClaim:
    floor: Floor
    folder: Path
    identity: str
    references: str
    kind = "rerun"

    @property
    def name(self) -> str:
        return self.folder.name

    def view(self) -> ClaimView:
        return ClaimView(self.identity, str(self.folder), self.floor.config.budget.run_tokens)

    def new_job(self, first_seen: str) -> Job:
        self.floor.log.info(
            "rerun: the portfolio moved under an ingested project", project=self.name
        )
        folder = str(self.folder)
        return Job(
            self.identity,
            self.name,
            folder,
            folder,
            first_seen,
            rerun=True,
            references=self.references,
        )

    def take_over(self, job: Job) -> Job:
        return job

    def duplicate(self, first: str) -> ItemResult:
        return ItemResult(self.name, "rerun", "duplicate", f"identical to {first}")

    def refused(self, reason: str) -> ItemResult:
        return ItemResult(self.name, "rerun", "failed", reason)

    def wait(self, refusal: str) -> ItemResult:
        self.floor.waiting[f"{self.name} (rerun)"] = refusal
        self.floor.log.info("rerun waits", project=self.name, reason=refusal)
        return ItemResult(self.name, "rerun", "waiting", refusal)

    def failed(self, cost: Cost, exc: BaseException) -> ItemResult:
        floor, identity = self.floor, self.identity
        if cost.kind == "put off":  # left unfinished: the next event or start tries again
            floor.log.warning("rerun put off", project=self.name, reason=cost.sentence)
            return ItemResult(self.name, "rerun", "retry", cost.sentence)
        # The ingested project stays where it is; only this identity is given up.
        floor.log.error("rerun failed", project=self.name, problem=cost.sentence)
        floor.ledger.budget.release(identity)
        floor.ledger.jobs.drop(identity)
        floor.ledger.mark(identity, "failed", now=floor.now(), error=cost.sentence)
        return ItemResult(self.name, "rerun", "failed", cost.sentence)

    def left(self, result: ItemResult) -> ItemResult:
        return result


Claim = InboxClaim | RerunClaim


def take_claim(
    floor: Floor, claimed: Path, portfolio: Portfolio, *, name: str | None = None
) -> InboxClaim | ItemResult:
    """A claimed input with its run identity, or what became of it when it has none (it cannot
    be read, is too large, or is not a bundle)."""
    name = name or original_name(claimed)
    not_taken = InboxFilter().not_taken(claimed, name=name)
    if not_taken is not None:  # a PDF, a symlink: set aside unread, with what the inbox takes
        return _left(floor, claimed, set_aside(floor, claimed, name, None, not_taken, fix=False))
    try:
        content = content_digest(claimed)
    except ClaimError as exc:  # a symlink, a pipe or a device inside the bundle
        return _left(floor, claimed, set_aside(floor, claimed, name, None, str(exc)))
    except (OSError, ValueError) as exc:
        sentence = f"{name}: cannot be read ({exc}); check its permissions and drop it again"
        return _left(floor, claimed, set_aside(floor, claimed, name, None, sentence))
    oversized = _oversized(floor.config, claimed, name)
    if oversized is not None:
        return _left(floor, claimed, set_aside(floor, claimed, name, content, oversized))
    remembered = floor.ledger.jobs.claim_identity(claimed.name)
    try:
        bundle = _bundle_root(floor.config, claimed)
        if bundle != claimed:
            content = content_digest(bundle)  # an archive: what it holds, as it will settle
        # The run's identity (its content and the portfolio inputs that shape its candidates)
        # is fixed when it is claimed: recovery and retries reuse it, so a portfolio that moved
        # in between cannot turn one claim into two runs.
        references = ""
        identity = remembered or _kept_identity(floor.ledger, content)
        if identity is None:
            identity, fit = portfolio.identity(bundle, content)
            references = json.dumps(fit.to_dict(), sort_keys=True)
        if remembered is None:
            floor.ledger.jobs.remember_claim(claimed.name, identity)
    except Exception as exc:
        cost = cost_of(exc, name, rerun=False)
        return _left(floor, claimed, costed(floor, claimed, name, content, cost, exc))
    return InboxClaim(floor, claimed, name, bundle, content, identity, references)


def _left(floor: Floor, claimed: Path, result: ItemResult) -> ItemResult:
    """Unless it waits in its claimed place (a retry) or goes on there (under way), the input
    has left it for good: the identity the claim was given is forgotten with it."""
    if result.state not in ("retry", UNDER_WAY):
        floor.ledger.jobs.forget_claim(claimed.name)
    return result


def costed(
    floor: Floor,
    claimed: Path,
    name: str,
    key: str,
    cost: Cost,
    exc: BaseException | None = None,
) -> ItemResult:
    """What a failure costs a claimed bundle: a bad bundle is set aside with the reason, a
    transient failure retried from its claimed place, a bug costs this bundle, never the
    daemon."""
    if cost.kind == "put off":
        return _retry_later(floor, claimed, name, key, cost.sentence)
    if cost.kind == "bug":
        floor.log.error("internal error in a bundle's run", bundle=name, exc_info=exc)
    return set_aside(floor, claimed, name, key, cost.sentence)


def set_aside(
    floor: Floor,
    claimed: Path,
    name: str,
    digest: str | None,
    sentence: str,
    *,
    fix: bool = True,
) -> ItemResult:
    """Into outbox/failed/ with its report. ``fix``: a bundle to correct and retry; else an
    input of a kind the inbox does not take, for which retrying changes nothing."""
    ledger, workspace = floor.ledger, floor.workspace
    # The user knows the bundle by its inbox name, not by where the daemon claimed it.
    sentence = (
        sentence.replace(f"{claimed}/", "").replace(str(claimed), name).replace(claimed.name, name)
    )
    if digest is not None:
        # Before the input moves: a kill in between leaves a claim that is decided again. A job
        # that ran keeps its row (its outputs stand) and its hold on the budget (what it was
        # billed is not charged yet), for `retry` to go on from.
        stored = ledger.jobs.get(digest)
        if stored is None or not Job.from_json(stored).done(Stage.RAN):
            ledger.jobs.drop(digest)
            ledger.budget.release(digest)
    shutil.rmtree(_unpacked(claimed), ignore_errors=True)
    destination = release(claimed, workspace.failed / name)
    report = destination.with_name(destination.name + ".error.txt")
    where = destination.relative_to(workspace.root)
    todo = (
        f"What to do: fix the bundle (it is in {where}), then run\n"
        f"    portfolio-optimiser retry {destination.name}\n"
        "or drop the corrected folder into inbox/projects/ again.\n"
        if fix
        else f"It is kept in {where}; delete it there once you no longer need it.\n"
    )
    publish_text(report, safe_text(f"{sentence}\n\n{todo}"))
    if digest is not None:
        if ledger.get(digest) is None:
            ledger.begin(digest, kind="bundle", name=name, now=floor.now())
        ledger.mark(digest, "failed", now=floor.now(), error=sentence, output=str(destination))
    floor.log.warning("bundle quarantined", bundle=name, problem=sentence, report=str(report))
    return ItemResult(name, "bundle", "failed", sentence, destination)


def _retry_later(floor: Floor, claimed: Path, name: str, digest: str, why: str) -> ItemResult:
    ledger, daemon = floor.ledger, floor.config.daemon
    item = ledger.get(digest)
    attempts = item.attempts if item is not None else 0
    if attempts >= daemon.retry_limit:
        sentence = f"{name}: gave up after {attempts} attempts ({why}); free the resource and retry"
        return set_aside(floor, claimed, name, digest, sentence)
    delay = next_backoff_s(attempts, base_s=daemon.retry_backoff_seconds, cap_s=3600)
    ledger.schedule_retry(digest, now=floor.now(), at=iso(floor.clock() + delay))
    floor.retry_due_at = None
    ledger.mark(digest, "retry", now=floor.now(), output=str(claimed), error=why)
    floor.log.warning("bundle will be retried", bundle=name, reason=why, in_seconds=delay)
    return ItemResult(name, "bundle", "retry", why)


def due_retries(floor: Floor, now: float) -> list[Path]:
    """Claimed bundles whose back-off has run out (a retry without a time is a bundle put
    back into the inbox by ``retry NAME``: the inbox takes it, not this)."""
    if next_retry(floor, now) > now:
        return []
    floor.retry_due_at = None
    return [
        Path(item.output)
        for item in floor.ledger.due_retries(now=iso(now))
        if item.next_attempt_at and item.output and Path(item.output).exists()
    ]


def next_retry(floor: Floor, now: float) -> float:
    """When the next back-off runs out; read from the ledger only when it may have moved, so
    an idle daemon's tick asks nothing of the database."""
    if floor.retry_due_at is None:
        times = [
            datetime.fromisoformat(item.next_attempt_at).timestamp()
            for item in floor.ledger.items("retry")
            # Only claims that are here: another machine's, or one gone, is no one's to wait for.
            if item.next_attempt_at and item.output and Path(item.output).exists()
        ]
        floor.retry_due_at = min(times, default=float("inf"))
    return floor.retry_due_at


def _unpacked(claimed: Path) -> Path:
    # Unpacked (or imported) beside the claimed input under a dot-name, which recovery skips.
    return claimed.with_name(f".{claimed.name}.d")


def _bundle_root(config: Config, claimed: Path) -> Path:
    # A half extraction left by a crash is cleared first: the input is the truth.
    unpacked = _unpacked(claimed)
    if unpacked.exists():
        shutil.rmtree(unpacked)
    if claimed.is_dir():
        # A folder is a bundle, or a planner's estimate with its side file and kuttliste.
        return import_folder(claimed, unpacked, reading=_reading(config)) or claimed
    return extract_bundle(
        claimed,
        unpacked,
        max_total_bytes=config.daemon.max_bundle_bytes,
        name=original_name(claimed),
        reading=_reading(config),
    )


def _reading(config: Config) -> Reading:
    return Reading(units=config.bundles.units, max_bytes=config.imports.max_bytes)


def _oversized(config: Config, claimed: Path, name: str) -> str | None:
    limit = config.daemon.max_bundle_bytes
    shot = snapshot(claimed)
    total = shot.total_bytes if shot is not None else 0
    if total <= limit:
        return None
    return (
        f"{name}: is {total / 1_048_576:.1f} MiB, above the limit of {limit / 1_048_576:.1f} MiB "
        "(daemon.max_bundle_bytes); split the bundle or raise the limit in the config"
    )


def _kept_identity(ledger: Ledger, content: str) -> str | None:
    """The identity of a job set aside after its run whose input had this content."""
    for stored in ledger.jobs.all(unfinished=True):
        job = Job.from_json(stored)
        if (
            job.content == content
            and not job.rerun
            and job.done(Stage.RAN)
            and not Path(job.claimed).exists()
        ):
            return job.identity
    return None
