"""The ledger: durable state per content hash, verdict history, and the candidates runs published."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.daemon.ledger import (
    STATES,
    CandidateInput,
    Ledger,
    LedgerError,
    next_backoff_s,
)

T0 = "2026-11-30T12:00:00+00:00"
T1 = "2026-11-30T12:00:10+00:00"
T2 = "2026-11-30T12:01:00+00:00"
T3 = "2026-11-30T12:05:00+00:00"
DIGEST = "a" * 64


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    """Every contract below holds for both: a SQLite file, and the PostgreSQL many machines share."""
    if request.param == "sqlite":
        opened = Ledger.open(tmp_path / "state" / "ledger.sqlite")
    else:
        opened = Ledger.connect(request.getfixturevalue("postgres").new_database())
    with opened:
        yield opened


def test_opening_creates_the_file_in_wal_mode_with_full_sync(tmp_path: Path) -> None:
    path = tmp_path / "state" / "ledger.sqlite"
    with Ledger.open(path) as ledger:
        assert path.is_file()
        assert ledger._db.one("PRAGMA journal_mode") == ("wal",)
        assert ledger._db.one("PRAGMA synchronous") == (2,)  # FULL


def test_begin_records_a_claimed_item(ledger: Ledger) -> None:
    item = ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
    assert (item.state, item.kind, item.name, item.attempts) == (
        "claimed",
        "bundle",
        "project-a",
        0,
    )
    assert (item.first_seen, item.updated) == (T0, T0)
    assert ledger.get(DIGEST) == item


def test_an_unknown_digest_is_none(ledger: Ledger) -> None:
    assert ledger.get("f" * 64) is None


@pytest.mark.loadbearing
def test_items_of_many_digests_are_those_the_ledger_holds(ledger: Ledger) -> None:
    digests = [f"d{i:04d}" for i in range(1203)]  # more than one query's worth
    with ledger.together():
        for d in digests:
            ledger.begin(d, kind="bundle", name=d, now=T0)
        for d in digests[::3]:
            ledger.mark(d, "done", now=T0)
    asked = [*digests[::2], "unknown", digests[0]]
    assert sorted(i.digest for i in ledger.items(of=iter(asked))) == sorted(digests[::2])
    done = ledger.items("done", of=asked)
    assert sorted(i.digest for i in done) == sorted(set(digests[::2]) & set(digests[::3]))


def test_state_transitions_are_recorded_and_replace_detail_output_and_error(ledger: Ledger) -> None:
    ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
    failed = ledger.mark(DIGEST, "failed", now=T1, error="index.md: frontmatter has no type")
    assert (failed.state, failed.error, failed.updated) == (
        "failed",
        "index.md: frontmatter has no type",
        T1,
    )
    assert failed.first_seen == T0
    waiting = ledger.mark(DIGEST, "waiting", now=T2, detail="portfolio budget spent")
    assert (waiting.state, waiting.detail, waiting.error) == (
        "waiting",
        "portfolio budget spent",
        None,
    )
    done = ledger.mark(DIGEST, "done", now=T3, output="outbox/runs/p/r1")
    assert (done.state, done.output, done.detail, done.error) == (
        "done",
        "outbox/runs/p/r1",
        None,
        None,
    )


@pytest.mark.loadbearing
def test_a_redrop_of_identical_content_finds_the_done_row(ledger: Ledger) -> None:
    ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
    ledger.mark(DIGEST, "done", now=T1, output="outbox/runs/p/r1")
    again = ledger.begin(DIGEST, kind="bundle", name="project-a copy", now=T3)
    assert again.state == "done"
    assert again.name == "project-a"
    assert again.output == "outbox/runs/p/r1"
    assert again.updated == T1
    assert len(ledger.items()) == 1


@pytest.mark.loadbearing
def test_schedule_retry_counts_attempts_and_keeps_the_time(ledger: Ledger) -> None:
    ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
    first = ledger.schedule_retry(DIGEST, now=T0, at=T1, error="disk full")
    assert (first.state, first.attempts, first.next_attempt_at, first.error) == (
        "retry",
        1,
        T1,
        "disk full",
    )
    second = ledger.schedule_retry(DIGEST, now=T1, at=T2)
    assert (second.attempts, second.next_attempt_at) == (2, T2)
    assert [i.digest for i in ledger.due_retries(now=T1)] == []
    assert [i.digest for i in ledger.due_retries(now=T2)] == [DIGEST]


def test_marking_retry_keeps_the_scheduled_time_and_leaving_retry_clears_it(ledger: Ledger) -> None:
    ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
    ledger.schedule_retry(DIGEST, now=T0, at=T2)
    kept = ledger.mark(DIGEST, "retry", now=T1, output="claimed/x", error="busy")
    assert (kept.next_attempt_at, kept.attempts, kept.output) == (T2, 1, "claimed/x")
    cleared = ledger.mark(DIGEST, "claimed", now=T2)
    assert cleared.next_attempt_at is None
    assert cleared.attempts == 1


def test_a_retry_without_a_time_is_due_at_once(ledger: Ledger) -> None:
    ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
    ledger.mark(DIGEST, "retry", now=T0)
    assert [i.digest for i in ledger.due_retries(now=T0)] == [DIGEST]


def test_due_retries_compares_instants_not_strings(ledger: Ledger) -> None:
    ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
    ledger.schedule_retry(DIGEST, now=T0, at="2026-11-30T13:00:00+01:00")  # = 12:00 UTC
    assert [i.digest for i in ledger.due_retries(now="2026-11-30T12:00:00Z")] == [DIGEST]


def test_a_malformed_retry_time_is_refused(ledger: Ledger) -> None:
    ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
    with pytest.raises(ValueError):
        ledger.schedule_retry(DIGEST, now=T0, at="in five minutes")


def test_marking_an_unknown_digest_names_it(ledger: Ledger) -> None:
    with pytest.raises(LedgerError, match=r"no item b+"):
        ledger.mark("b" * 64, "done", now=T0)


def test_an_unknown_state_or_kind_is_refused(ledger: Ledger) -> None:
    ledger.begin(DIGEST, kind="bundle", name="p", now=T0)
    with pytest.raises(ValueError, match="state must be one of"):
        ledger.mark(DIGEST, "duplicate", now=T0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind must be"):
        ledger.begin("c" * 64, kind="zip", name="p", now=T0)  # type: ignore[arg-type]


def test_items_filter_by_state_in_first_seen_order_and_counts_cover_every_state(
    ledger: Ledger,
) -> None:
    for n, state in enumerate(("done", "failed", "done")):
        digest = str(n) * 64
        ledger.begin(digest, kind="verdict", name=f"v{n}.json", now=T0)
        ledger.mark(digest, state, now=T1)  # type: ignore[arg-type]
    assert [i.name for i in ledger.items()] == ["v0.json", "v1.json", "v2.json"]
    assert [i.name for i in ledger.items("done")] == ["v0.json", "v2.json"]
    counts = ledger.counts()
    assert set(counts) == set(STATES)
    assert counts["done"] == 2 and counts["failed"] == 1 and counts["claimed"] == 0


@pytest.mark.loadbearing
def test_backoff_doubles_from_the_base_and_stops_at_the_cap() -> None:
    delays = [next_backoff_s(n, base_s=10.0, cap_s=300.0) for n in range(0, 8)]
    assert delays == [10.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    assert next_backoff_s(10_000, base_s=10.0, cap_s=300.0) == 300.0


def test_backoff_refuses_negative_seconds() -> None:
    with pytest.raises(ValueError):
        next_backoff_s(1, base_s=-1.0, cap_s=10.0)


@pytest.mark.loadbearing
def test_the_last_recorded_verdict_wins_and_history_keeps_every_edit(ledger: Ledger) -> None:
    ledger.records.record_verdict("c-1", "d1", "c-1.json", "approved", T0)
    ledger.records.record_verdict("c-1", "d2", "c-1.json", "rejected", T1)
    # A wall clock stepped back must not let the older edit win: order is insertion order.
    ledger.records.record_verdict("c-1", "d3", "c-1.json", "approved_with_adjustment", T0)
    latest = ledger.records.latest_verdict("c-1")
    assert latest is not None
    assert (latest.digest, latest.decision) == ("d3", "approved_with_adjustment")
    assert [v.decision for v in ledger.records.verdict_history("c-1")] == [
        "approved",
        "rejected",
        "approved_with_adjustment",
    ]


def test_recording_the_latest_verdict_again_adds_nothing_but_a_revert_does(ledger: Ledger) -> None:
    assert ledger.records.record_verdict("c-1", "d1", "c-1.json", "approved", T0)
    assert not ledger.records.record_verdict("c-1", "d1", "c-1.json", "approved", T1)
    assert ledger.records.record_verdict("c-1", "d2", "c-1.json", "rejected", T1)
    assert ledger.records.record_verdict("c-1", "d1", "c-1.json", "approved", T2)
    assert [v.digest for v in ledger.records.verdict_history("c-1")] == ["d1", "d2", "d1"]


def test_verdicts_of_different_candidates_do_not_mix(ledger: Ledger) -> None:
    ledger.records.record_verdict("c-1", "d1", "a.json", "approved", T0)
    ledger.records.record_verdict("c-2", "d2", "b.json", "rejected", T1)
    latest = ledger.records.latest_verdict("c-1")
    assert latest is not None and latest.decision == "approved"


@pytest.mark.loadbearing
def test_an_unknown_candidate_is_none(ledger: Ledger) -> None:
    assert ledger.records.candidate("c-unknown") is None
    assert ledger.records.latest_verdict("c-unknown") is None
    assert ledger.records.verdict_history("c-unknown") == []


def test_candidates_are_recorded_and_a_later_run_takes_them_over(ledger: Ledger) -> None:
    added = ledger.records.add_candidates(
        "run-1",
        "p-1",
        [CandidateInput("c-1", '["p-1"]', "as-1", None), ("c-2", '["p-1", 2]', "as-2", "di-2")],
        now=T0,
    )
    assert added == 2
    row = ledger.records.candidate("c-2")
    assert row is not None
    assert (row.project_id, row.run_id, row.assessment, row.disagreement) == (
        "p-1",
        "run-1",
        "as-2",
        "di-2",
    )
    ledger.records.add_candidates(
        "run-2", "p-1", [CandidateInput("c-1", '["p-1"]', "as-9")], now=T1
    )
    again = ledger.records.candidate("c-1")
    assert again is not None and (again.run_id, again.assessment, again.recorded_at) == (
        "run-2",
        "as-9",
        T1,
    )


def read_elsewhere(path: Path, sql: str) -> list[tuple[object, ...]]:
    """What another process (``status``) would see right now."""
    with closing(sqlite3.connect(path)) as other:
        return other.execute(sql).fetchall()


@pytest.mark.loadbearing
def test_every_write_is_committed_before_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with Ledger.open(path) as ledger:
        ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
        assert read_elsewhere(path, "SELECT state FROM items") == [("claimed",)]
        ledger.schedule_retry(DIGEST, now=T1, at=T2)
        assert read_elsewhere(path, "SELECT state, attempts FROM items") == [("retry", 1)]
        ledger.mark(DIGEST, "done", now=T2)
        assert read_elsewhere(path, "SELECT state FROM items") == [("done",)]
        ledger.records.record_verdict("c-1", "d1", "c-1.json", "approved", T2)
        assert read_elsewhere(path, "SELECT decision FROM verdicts") == [("approved",)]
        ledger.records.add_candidates("run-1", "p-1", [CandidateInput("c-1", "[]")], now=T2)
        assert read_elsewhere(path, "SELECT run_id FROM candidates") == [("run-1",)]


@pytest.mark.loadbearing
def test_reopening_keeps_every_committed_write(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger.open(path)
    ledger.begin(DIGEST, kind="bundle", name="project-a", now=T0)
    ledger.mark(DIGEST, "done", now=T1, output="out")
    ledger.records.record_verdict("c-1", "d1", "c-1.json", "approved", T1)
    ledger.records.add_candidates("run-1", "p-1", [CandidateInput("c-1", "[]")], now=T1)
    # A second connection sees every write without the first closing: each write committed.
    with closing(sqlite3.connect(path)) as other:
        assert other.execute("SELECT state FROM items").fetchall() == [("done",)]
    ledger.close()
    with Ledger.open(path) as reopened:
        item = reopened.get(DIGEST)
        assert item is not None and (item.state, item.output) == ("done", "out")
        assert reopened.records.latest_verdict("c-1") is not None
        assert reopened.records.candidate("c-1") is not None


@pytest.mark.loadbearing
def test_a_corrupt_file_is_a_ledger_error_naming_the_file_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"this is not a database, it is a note somebody saved here\n" * 200)
    with pytest.raises(LedgerError) as caught:
        Ledger.open(path)
    message = str(caught.value)
    assert str(path) in message
    assert "restore it from a backup" in message


def test_a_ledger_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(LedgerError, match="newer portfolio-optimiser"):
        Ledger.open(path)


# -- the ledger many machines share (PostgreSQL) ----------------------------------------------------


@pytest.mark.postgres
def test_machines_starting_at_once_create_the_shared_ledger_once(postgres: Any) -> None:
    url = postgres.new_database()
    with ThreadPoolExecutor(4) as pool:
        opened = list(pool.map(lambda _: Ledger.connect(url), range(4)))
    try:
        opened[0].begin(DIGEST, kind="bundle", name="b", now=T0)
        assert all(other.get(DIGEST) is not None for other in opened)  # one database, seen by all
    finally:
        for each in opened:
            each.close()


@pytest.mark.postgres
def test_a_shared_ledger_from_a_newer_schema_is_refused(postgres: Any) -> None:
    import psycopg

    url = postgres.new_database()
    Ledger.connect(url).close()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("UPDATE ledger_schema SET version = 99")
    with pytest.raises(LedgerError, match="newer portfolio-optimiser"):
        Ledger.connect(url)


@pytest.mark.postgres
def test_an_unreachable_shared_ledger_is_one_sentence_naming_the_setting(postgres: Any) -> None:
    with pytest.raises(LedgerError, match=r"\[scale\] database_url") as caught:
        Ledger.connect(postgres.url("no_such_database"))
    assert "\n" not in str(caught.value).strip()


def test_a_run_start_is_counted_until_it_finishes(ledger: Ledger) -> None:
    assert ledger.unfinished_starts(DIGEST) == 0
    assert ledger.start_run(DIGEST) == 1
    assert ledger.start_run(DIGEST) == 2  # the first one took the process down
    ledger.finish_run(DIGEST)
    assert ledger.unfinished_starts(DIGEST) == 0


def test_a_job_checkpoint_is_replaced_and_only_unsettled_ones_are_unfinished(
    ledger: Ledger,
) -> None:
    ledger.jobs.save("j1", "claimed", '{"stage": "claimed"}', now=T0)
    ledger.jobs.save("j2", "ran", '{"stage": "ran"}', now=T0)
    ledger.jobs.save("j1", "settled", '{"stage": "settled"}', now=T1)
    assert ledger.jobs.get("j1") == '{"stage": "settled"}'
    assert ledger.jobs.all(unfinished=True) == ['{"stage": "ran"}']
    assert ledger.jobs.all() == ['{"stage": "settled"}', '{"stage": "ran"}']
    ledger.jobs.drop("j2")
    assert ledger.jobs.get("j2") is None


def test_a_claim_keeps_its_first_identity(ledger: Ledger) -> None:
    ledger.jobs.remember_claim("c1", "first")
    ledger.jobs.remember_claim("c1", "second")
    assert ledger.jobs.claim_identity("c1") == "first"
    ledger.jobs.forget_claim("c1")
    assert ledger.jobs.claim_identity("c1") is None


def test_a_charge_is_kept_once_per_workflow_step_attempt_and_call(ledger: Ledger) -> None:
    assert ledger.budget.next_charge_attempt("wf", "ran") == 1
    assert ledger.budget.record_charge("wf", "ran", 1, 1, 120, now=T0)
    assert not ledger.budget.record_charge("wf", "ran", 1, 1, 120, now=T1)  # the same call again
    assert ledger.budget.record_charge("wf", "ran", 1, 2, 30, now=T1)
    assert ledger.budget.next_charge_attempt("wf", "ran") == 2  # a killed attempt keeps its number
    assert ledger.budget.record_charge("wf", "ran", 2, 1, 120, now=T2)
    assert ledger.budget.record_charge("other", "ran", 1, 1, 7, now=T2)
    assert ledger.budget.charged_tokens("wf") == 270
    assert ledger.budget.charged_tokens("nothing") == 0


def test_a_hold_on_the_budget_is_taken_only_when_the_cap_leaves_it(ledger: Ledger) -> None:
    assert ledger.budget.reserve("a", 100, cap=250, spent=0, now=T0)
    assert ledger.budget.reserve("b", 100, cap=250, spent=0, now=T0)
    assert not ledger.budget.reserve("c", 100, cap=250, spent=0, now=T0)  # 50 left
    assert ledger.budget.reserve("a", 100, cap=250, spent=200, now=T1), (
        "a hold already taken stands"
    )
    assert ledger.budget.reserved_tokens() == 200
    ledger.budget.release("a")
    assert ledger.budget.reserve("c", 100, cap=250, spent=40, now=T1)
    assert ledger.budget.reserved_tokens() == 200


@pytest.mark.loadbearing
def test_machines_asking_at_once_never_hold_more_than_the_cap(ledger: Ledger) -> None:
    """Eight workers, each on its own connection, asking for a run's claim at the same moment:
    the cap funds five, and exactly five are held, whichever ask first."""
    others = [ledger.reopen() for _ in range(8)]
    try:
        with ThreadPoolExecutor(8) as pool:
            held = list(
                pool.map(
                    lambda pair: pair[1].budget.reserve(
                        f"job-{pair[0]}", 100, cap=500, spent=0, now=T0
                    ),
                    enumerate(others),
                )
            )
    finally:
        for other in others:
            other.close()
    assert held.count(True) == 5
    assert ledger.budget.reserved_tokens() == 500
