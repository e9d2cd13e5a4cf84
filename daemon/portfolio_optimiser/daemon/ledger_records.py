"""The ledger's records of what runs published and experts decided: each candidate a run
published (its key and reasoning record ids), each project's latest run, and each verdict's
history per candidate (the last one recorded wins for readers). ``ledger.records``, on the
ledger's connection: one database, one writer."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from .db import Database

__all__ = [
    "CandidateInput",
    "CandidateRow",
    "LedgerRecords",
    "ProjectPage",
    "SignatureRow",
    "VerdictRow",
]


@dataclass(frozen=True, slots=True)
class VerdictRow:
    candidate_id: str
    digest: str
    name: str
    decision: str
    recorded_at: str


@dataclass(frozen=True, slots=True)
class SignatureRow:
    """Who a verdict's signature proved, and with which key (by the verdict file's digest)."""

    principal: str
    fingerprint: str
    key_type: str
    namespace: str
    recorded_at: str


class ProjectPage(NamedTuple):
    """A project's latest run, and its candidates as the portfolio page counts them (JSON)."""

    project_id: str
    run_id: str
    folder: str
    candidates: str | None


class CandidateInput(NamedTuple):
    """One candidate a run published: its id, its key (JSON) and its reasoning record ids."""

    candidate_id: str
    key_json: str
    assessment: str | None = None
    disagreement: str | None = None


@dataclass(frozen=True, slots=True)
class CandidateRow:
    candidate_id: str
    project_id: str
    run_id: str
    key_json: str
    assessment: str | None
    disagreement: str | None
    recorded_at: str | None


class LedgerRecords:
    """Candidates, project runs and verdicts (``ledger.records``), on the ledger's connection."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # -- verdicts -------------------------------------------------------------------------------

    def record_verdict(
        self, candidate_id: str, digest: str, name: str, decision: str, now: str
    ) -> bool:
        """Append a verdict to the candidate's history; False if it is already the latest.

        Re-recording the latest verdict (a crash between this and marking the item ``done``) adds
        nothing; an edit back to an earlier verdict is a new entry and wins again.
        """
        latest = self.latest_verdict(candidate_id)
        if latest is not None and latest.digest == digest:
            return False
        self._db.write(
            "INSERT INTO verdicts (candidate_id, digest, name, decision, recorded_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (candidate_id, digest, name, decision, now),
        )
        return True

    def verdict_history(self, candidate_id: str) -> list[VerdictRow]:
        """Every verdict recorded for the candidate, oldest first."""
        # Ordered by insertion (seq), not recorded_at: a wall clock stepped back must not let an
        # older edit win over a newer one.
        rows = self._db.all(
            "SELECT candidate_id, digest, name, decision, recorded_at FROM verdicts"
            " WHERE candidate_id = ? ORDER BY seq",
            (candidate_id,),
        )
        return [VerdictRow(*row) for row in rows]

    def latest_verdicts(self) -> list[VerdictRow]:
        """Each candidate's current verdict (its last recorded one), in recording order."""
        rows = self._db.all(
            "SELECT candidate_id, digest, name, decision, recorded_at FROM verdicts v"
            " WHERE seq = (SELECT MAX(seq) FROM verdicts w WHERE w.candidate_id = v.candidate_id)"
            " ORDER BY seq"
        )
        return [VerdictRow(*row) for row in rows]

    def latest_verdict(self, candidate_id: str) -> VerdictRow | None:
        """The verdict recorded last for the candidate (last write wins); None if there is none."""
        row = self._db.one(
            "SELECT candidate_id, digest, name, decision, recorded_at FROM verdicts"
            " WHERE candidate_id = ? ORDER BY seq DESC LIMIT 1",
            (candidate_id,),
        )
        return None if row is None else VerdictRow(*row)

    def record_signature(self, digest: str, signed: SignatureRow) -> None:
        """What the signature of the verdict with these bytes proved (a signature made again
        for the same bytes replaces it)."""
        self._db.write(
            "INSERT INTO signatures (digest, principal, fingerprint, key_type, namespace,"
            " recorded_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO UPDATE SET"
            " principal = excluded.principal, fingerprint = excluded.fingerprint,"
            " key_type = excluded.key_type, namespace = excluded.namespace,"
            " recorded_at = excluded.recorded_at",
            (digest, signed.principal, signed.fingerprint, signed.key_type, signed.namespace,
             signed.recorded_at),
        )  # fmt: skip

    def signature(self, digest: str) -> SignatureRow | None:
        """Who signed the verdict with these bytes; None if it was read unsigned."""
        row = self._db.one(
            "SELECT principal, fingerprint, key_type, namespace, recorded_at FROM signatures"
            " WHERE digest = ?",
            (digest,),
        )
        return None if row is None else SignatureRow(*row)

    # -- candidates -----------------------------------------------------------------------------

    def add_candidates(
        self,
        run_id: str,
        project_id: str,
        rows: Iterable[tuple[str, str, str | None, str | None]],
        *,
        now: str | None = None,
    ) -> int:
        """Record the candidates a run published, in one transaction; returns how many.

        Each row is a :class:`CandidateInput` or a plain tuple in its order. Candidate ids are
        minted from content, so an id seen again in a later run is the same candidate: its row is
        updated to point at the newest run. ``recorded_at`` is ``now`` when given, else NULL.
        """
        values = [
            (candidate_id, project_id, run_id, key_json, assessment, disagreement, now)
            for candidate_id, key_json, assessment, disagreement in rows
        ]
        self._db.write_many(
            "INSERT INTO candidates (candidate_id, project_id, run_id, key_json, assessment,"
            " disagreement, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (candidate_id) DO UPDATE SET project_id = excluded.project_id,"
            " run_id = excluded.run_id, key_json = excluded.key_json,"
            " assessment = excluded.assessment, disagreement = excluded.disagreement,"
            " recorded_at = excluded.recorded_at",
            values,
        )
        return len(values)

    def record_project_run(
        self, project_id: str, run_id: str, folder: str, *, now: str, page: str | None = None
    ) -> None:
        """This run is now the project's latest: the one the portfolio report counts. ``page``:
        its validated candidates as the page counts them (JSON), kept with it in one transaction
        so the page is built from the ledger, not by reading every run again."""
        run = (
            "INSERT INTO project_runs (project_id, run_id, folder, recorded_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (project_id) DO UPDATE SET run_id = excluded.run_id,"
            " folder = excluded.folder, recorded_at = excluded.recorded_at",
            (project_id, run_id, folder, now),
        )
        self._db.write_all([run] if page is None else [run, _page(project_id, run_id, page)])

    def record_project_page(self, project_id: str, run_id: str, page: str) -> None:
        """The page's candidates of a run recorded before the ledger kept them (read once)."""
        self._db.write_all([_page(project_id, run_id, page)])

    def project_runs(self) -> list[tuple[str, str, str]]:
        """Each project's latest run: (project id, run id, folder), by project."""
        rows = self._db.all(
            "SELECT project_id, run_id, folder FROM project_runs ORDER BY project_id"
        )
        return [(str(p), str(r), str(f)) for p, r, f in rows]

    def latest_runs(self) -> dict[str, str]:
        """Each project's latest run id, by project id: what a look at ten thousand projects
        needs of ``project_runs``, read without their folders."""
        return {
            str(p): str(r) for p, r in self._db.all("SELECT project_id, run_id FROM project_runs")
        }

    def project_pages(self, projects: Iterable[str] | None = None) -> list[ProjectPage]:
        """Each project's latest run with the page's candidates kept for it (None where the
        ledger has none for that run), by project; only ``projects`` when given."""
        sql = (
            "SELECT r.project_id, r.run_id, r.folder, p.candidates FROM project_runs r"
            " LEFT JOIN project_pages p ON p.project_id = r.project_id AND p.run_id = r.run_id"
        )
        wanted: tuple[str, ...] = ()
        if projects is not None:
            wanted = tuple(sorted(set(projects)))
            if not wanted:
                return []
            sql += f" WHERE r.project_id IN ({', '.join('?' * len(wanted))})"
        rows = self._db.all(sql + " ORDER BY r.project_id", wanted)
        return [ProjectPage(str(p), str(r), str(f), c) for p, r, f, c in rows]

    def candidate(self, candidate_id: str) -> CandidateRow | None:
        """The candidate with this id, or None when no run published it."""
        row = self._db.one(
            "SELECT candidate_id, project_id, run_id, key_json, assessment, disagreement,"
            " recorded_at FROM candidates WHERE candidate_id = ?",
            (candidate_id,),
        )
        return None if row is None else CandidateRow(*row)


def _page(project_id: str, run_id: str, page: str) -> tuple[str, tuple[str, str, str]]:
    return (
        "INSERT INTO project_pages (project_id, run_id, candidates) VALUES (?, ?, ?)"
        " ON CONFLICT (project_id) DO UPDATE SET run_id = excluded.run_id,"
        " candidates = excluded.candidates",
        (project_id, run_id, page),
    )
