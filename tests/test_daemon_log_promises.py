"""Where a log line is a promise to the operator, it is made: the quarantine, the budget's stop
and wait, the breaker opening. Read with structlog's ``capture_logs``, on the real processor."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from portfolio_optimiser.config import load_config
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.processor import Processor
from portfolio_optimiser.daemon.workspace import Workspace

from .conftest import EXAMPLES
from .daemon_helpers import config_with_local_server
from .fakes.llm_server import FakeLLMServer

SCHOOL = EXAMPLES / "portfolio" / "lillevik-school"


class Clock:
    now = 1_790_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    return ws


def processor_for(
    ws: Workspace,
    ledger: Ledger,
    environ: dict[str, str],
    *,
    config: Path | None = None,
    **budget: int,
) -> Processor:
    config_ = load_config(config)
    if budget:
        config_ = config_.model_copy(update={"budget": config_.budget.model_copy(update=budget)})
    return Processor(ws, config_, ledger, Clock(), structlog.get_logger("test"), environ=environ)


@pytest.fixture
def ledger(workspace: Workspace) -> Iterator[Ledger]:
    opened = Ledger.open(workspace.ledger_file)
    yield opened
    opened.close()


def settle(processor: Processor) -> list[Any]:
    processor.scan()
    processor.clock.now += 10  # type: ignore[attr-defined]
    return processor.step()


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


@pytest.mark.loadbearing
def test_a_quarantine_is_logged_with_the_bundle_the_problem_and_the_report(
    workspace: Workspace, ledger: Ledger
) -> None:
    entry = workspace.inbox_projects / "broken"
    shutil.copytree(SCHOOL, entry)
    (entry / "cost" / "07-utendors.md").write_text(
        '---\ntype: cost-line\ncode: "07"\namount_nok: twelve\n---\n', encoding="utf-8"
    )
    processor = processor_for(workspace, ledger, {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"})
    with capture_logs() as logs:
        [result] = settle(processor)
    assert result.state == "failed"
    [logged] = events(logs, "bundle quarantined")
    assert logged["log_level"] == "warning" and logged["bundle"] == "broken"
    assert "amount_nok" in logged["problem"]
    assert Path(logged["report"]) == workspace.failed / "broken.error.txt"


@pytest.mark.loadbearing
def test_a_bundle_the_budget_cannot_fund_is_logged_as_waiting(
    workspace: Workspace, ledger: Ledger
) -> None:
    shutil.copytree(SCHOOL, workspace.inbox_projects / "lillevik-school")
    processor = processor_for(
        workspace,
        ledger,
        {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"},
        portfolio_tokens=10,
        run_tokens=100,
    )
    with capture_logs() as logs:
        settle(processor)
    [logged] = events(logs, "bundle waits")
    assert logged["bundle"] == "lillevik-school" and "budget" in logged["reason"]


def run_with_model(
    server: FakeLLMServer, workspace: Workspace, ledger: Ledger, tmp_path: Path, **budget: int
) -> tuple[Any, list[dict[str, Any]]]:
    """The school run once with the local advisor pointed at ``server``: (result, log events)."""
    environ = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "offline"}
    config = config_with_local_server(tmp_path / "config.toml", server.base_url)
    processor = processor_for(workspace, ledger, environ, config=config, **budget)
    shutil.copytree(SCHOOL, workspace.inbox_projects / "lillevik-school")
    with capture_logs() as logs:
        [result] = settle(processor)
    return result, logs


@pytest.mark.loadbearing
def test_a_run_that_opens_an_advisors_circuit_logs_it_once(
    workspace: Workspace, ledger: Ledger, tmp_path: Path
) -> None:
    with FakeLLMServer(mode="server_error") as server:
        result, logs = run_with_model(server, workspace, ledger, tmp_path)
        assert server.requests  # it was asked, and failed
    assert result.state == "done"
    [opened] = events(logs, "advisor circuit opened")
    assert opened["log_level"] == "warning"
    assert opened["advisor"] == "openai-compatible-local"
    assert opened["failures"] >= 1 and opened["until"].endswith("Z")


@pytest.mark.loadbearing
def test_a_run_stopped_by_its_budget_is_logged(
    workspace: Workspace, ledger: Ledger, tmp_path: Path
) -> None:
    with FakeLLMServer(content="The figures hold.\nVERDICT: APPROVE") as server:
        result, logs = run_with_model(
            server, workspace, ledger, tmp_path, run_tokens=2000, call_tokens=2000
        )
    assert result.state == "done"
    [stopped] = events(logs, "run stopped by its budget")
    assert stopped["project"] == "lillevik-school" and stopped["which"]


@pytest.mark.loadbearing
def test_a_bundle_taken_is_logged_before_its_run_ends(workspace: Workspace, ledger: Ledger) -> None:
    shutil.copytree(SCHOOL, workspace.inbox_projects / "lillevik-school")
    processor = processor_for(workspace, ledger, {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"})
    with capture_logs() as logs:
        [result] = settle(processor)
    assert result.state == "done"
    names = [e["event"] for e in logs]
    [taken] = events(logs, "bundle taken")
    assert taken["bundle"] == "lillevik-school"
    assert names.index("bundle taken") < max(i for i, n in enumerate(names) if n != "bundle taken")
