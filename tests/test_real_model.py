"""The product against a real inference server: llama-cpp-python's, serving SmolLM2 on 127.0.0.1.

What is asserted is outcomes, never model quality: a 135M model answers nonsense, prose where
JSON was asked, or nothing, and every one of those must end as a recorded outcome while the run
finds at least what the offline run of the same bundle finds. The server is started, stopped,
killed mid-run and restarted by the tests themselves; a recording proxy in front of it shows what
really left the process.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .daemon_helpers import (
    Processes,
    copy_example,
    ledger_items,
    make_workspace,
    run_cli,
    wait_for,
)
from .fakes.recording_proxy import RecordingProxy
from .llama_server import MODEL_ALIAS, LlamaServer, require_local_model
from .pipeline_helpers import small_bundle

# pytest-timeout's limit counts a test's fixtures too: above ``model_run``'s own deadline, so that a
# run out of time fails as that run, not as pytest's bare stack.
pytestmark = [pytest.mark.real_model, pytest.mark.timeout(1500)]

ADVISOR = "smollm2-local"
PROJECTS = ("lillevik-school", "e39-road-section", "hospital-it-system")
MODEL_ENV = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "offline"}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    server = LlamaServer(require_local_model(), tmp_path_factory.mktemp("llama"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def model_config(
    workspace: Path, base_url: str, *, options: dict[str, Any] | None = None, **budget: int
) -> None:
    """The workspace's config: the packaged default, small enough for a 135M model on 2 cores,
    with one advisor — the server under test — that may propose and check."""
    text = (workspace / "config" / "portfolio-optimiser.toml").read_text("utf-8")
    text = text[: text.index("[[advisors]]")] + text[text.index("[data_source]") :]
    settings = {
        "budget_chars": 4000,
        "propose_output_tokens": 384,
        "check_output_tokens": 96,
        "call_tokens": 7000,
        "max_rounds": 2,
        "max_attempts": 2,
        **budget,
    }
    for key, value in settings.items():
        text, count = re.subn(rf"(?m)^{key} = \S+", f"{key} = {value}", text)
        assert count == 1, key
    merged = {"base_url": base_url, "timeout_seconds": 120, **(options or {})}
    inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in merged.items())
    text += (
        "\n[[advisors]]\n"
        f'id = "{ADVISOR}"\nname = "SmolLM2 on llama-cpp-python"\nadapter = "openai-compatible"\n'
        f'provider = "self-hosted"\nmodel = "{MODEL_ALIAS}"\nlocal = true\n'
        'capabilities = ["propose", "cost_review", "independent_reasoning"]\n'
        f"options = {{ {inline} }}\n"
    )
    (workspace / "config" / "portfolio-optimiser.toml").write_text(text, "utf-8")


def workspace_with(root: Path, *projects: str) -> Path:
    ws = make_workspace(root)
    for project in projects:
        copy_example(project, ws / "inbox" / "projects" / project)
    return ws


def provenance(ws: Path, project: str) -> dict[str, Any]:
    [path] = (ws / "outbox" / "runs" / project).glob("*/provenance.json")
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data


def proposals(ws: Path, project: str) -> dict[str, Any]:
    [path] = (ws / "outbox" / "runs" / project).glob("*/proposals.json")
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data


def accepted(ws: Path, project: str) -> set[str]:
    return {
        c["id"]
        for c in proposals(ws, project)["candidates"]
        if c["validator"]["outcome"] == "accepted"
    }


def consultations(ws: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted((ws / ".state" / "reasoning").glob("*/*.json")):
        record = json.loads(path.read_text("utf-8"))
        if record["body"]["kind"] == "consultation":
            found.append(record["body"])
    return found


@pytest.fixture(scope="module")
def offline_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example portfolio through ``once`` with no model: what a model run must not lose."""
    ws = workspace_with(tmp_path_factory.mktemp("offline"), *PROJECTS)
    done = run_cli("once", ws)
    assert done.returncode == 0, done.stderr[-2000:]
    return ws


@pytest.fixture(scope="module")
def model_run(
    tmp_path_factory: pytest.TempPathFactory, llama: LlamaServer
) -> Iterator[tuple[Path, Any, RecordingProxy]]:
    """The example portfolio through ``once``, the local model proposing and checking."""
    upstream = llama.base_url.removesuffix("/v1")
    with RecordingProxy(upstream) as proxy:
        ws = workspace_with(tmp_path_factory.mktemp("model"), *PROJECTS)
        model_config(ws, proxy.base_url)
        # 207 s on an idle 2-core machine, 606 s under tests/bench/load.py: over 5× the first.
        done = run_cli("once", ws, env=MODEL_ENV, timeout_s=1200)
        yield ws, done, proxy


@pytest.mark.loadbearing
def test_once_with_the_local_model_proposing_and_checking_exits_0_and_loses_nothing(
    model_run: tuple[Path, Any, RecordingProxy], offline_reference: Path
) -> None:
    ws, done, _proxy = model_run
    assert done.returncode == 0, done.stderr[-3000:]
    for project in PROJECTS:
        seen = provenance(ws, project)
        assert seen["proposer"] == ADVISOR, (project, seen["notes"])
        assert not seen["ran_locally"]
        for candidate in proposals(ws, project)["candidates"]:
            assert candidate["validator"]["outcome"] in {"accepted", "rejected"}
        assert accepted(ws, project) >= accepted(offline_reference, project), project
    assert [i.state for i in ledger_items(ws, "bundle")] == ["done"] * len(PROJECTS)


def test_the_report_shows_what_the_checker_said(
    model_run: tuple[Path, Any, RecordingProxy],
) -> None:
    ws, _done, _proxy = model_run
    reports = [p.read_text("utf-8") for p in (ws / "outbox" / "runs").glob("*/*/report.md")]
    heard = [r for r in reports if "## What the checker said" in r]
    assert heard, "no report carries the checker's words"
    assert any(f"{ADVISOR} ({MODEL_ALIAS}): **" in r for r in heard)


def test_structured_output_is_negotiated_and_the_refusal_remembered(
    model_run: tuple[Path, Any, RecordingProxy],
) -> None:
    ws, _done, proxy = model_run
    proposer = [c for c in consultations(ws) if c["question"].startswith("Subject: savings in")]
    assert proposer, "the proposer was never consulted"
    # The first exchange meets the refusal of json_schema (HTTP 500) and steps down; the runs
    # after it open with json_object, because the refusal is read back from the records.
    assert proposer[0]["refused"] == ["output_mode=json_schema"]
    assert all(c["output_mode"] == "json_object" for c in proposer if c["status"] == "completed")
    assert all(c["refused"] == [] for c in proposer[1:])
    formats = [r["response_format"]["type"] for r in proxy.requests() if "response_format" in r]
    assert formats.count("json_schema") == 1 and "json_object" in formats


@pytest.mark.loadbearing
def test_every_call_carries_an_output_cap_the_server_honours(
    model_run: tuple[Path, Any, RecordingProxy],
) -> None:
    ws, _done, proxy = model_run
    calls = [r for r in proxy.requests() if "messages" in r]
    assert calls
    for body in calls:
        assert 0 < body["max_tokens"] <= 384 and body["max_completion_tokens"] == body["max_tokens"]
    for consultation in consultations(ws):
        if (
            consultation["status"] == "completed"
            and "maker-checker" not in consultation["question"]
        ):
            assert consultation["usage"]["output_tokens"] <= 384 + 8


def test_the_proposer_is_offered_its_tools(model_run: tuple[Path, Any, RecordingProxy]) -> None:
    _ws, _done, proxy = model_run
    offered = [
        {t["function"]["name"] for t in r.get("tools", [])}
        for r in proxy.requests()
        if "response_format" in r
    ]
    assert offered and all({"list_cost_lines", "read_concept"} <= names for names in offered)


def test_with_the_server_stopped_once_exits_0_and_the_run_says_it_was_local(
    tmp_path: Path, llama: LlamaServer
) -> None:
    dead = LlamaServer(llama.model, tmp_path)  # a free port that nothing serves
    ws = workspace_with(tmp_path / "ws", "lillevik-school")
    model_config(ws, dead.base_url)
    done = run_cli("once", ws, env=MODEL_ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = provenance(ws, "lillevik-school")
    assert seen["ran_locally"] and seen["proposer"] is None
    assert "unavailable" in seen["local_because"]
    statuses = {c["status"] for c in consultations(ws)}
    assert statuses == {"unavailable"}, statuses
    advisors = json.loads(run_cli("advisors", ws, "--json", env=MODEL_ENV).stdout)
    [state] = [a for a in advisors["advisors"] if a["id"] == ADVISOR]
    assert state["status"] == "temporarily_failed", state


# -- failure modes of a real server, one small bundle each -------------------------------------


def depot(ws: Path, name: str, *, saving: int = 144000) -> Path:
    """A small bundle with its own project id, dropped by rename (it arrives whole)."""
    staging = ws / ".staging"
    staging.mkdir(exist_ok=True)
    bundle = small_bundle(staging / name, project_id=name)
    cut = bundle / "k" / "k-01.md"
    cut.write_text(cut.read_text().replace("144000", str(saving)))
    target = ws / "inbox" / "projects" / name
    bundle.rename(target)
    return target


def test_a_server_killed_mid_run_ends_as_recorded_outcomes_and_the_restarted_one_is_heard(
    tmp_path: Path, llama: LlamaServer
) -> None:
    server = LlamaServer(llama.model, tmp_path).start()
    try:
        ws = make_workspace(tmp_path / "ws")
        # The default 120 s a call, not less: the restarted server's answer must come in time
        # beside the other worker's tests (a dead server's calls fail at once whatever it is).
        model_config(ws, server.base_url)
        depot(ws, "depot-a")
        processes = Processes(tmp_path / "proc")
        try:
            running = processes.start("once", ws, env=MODEL_ENV)
            wait_for(lambda: (ws / ".state" / "reasoning").is_dir(), 60, what="the run's records")
            time.sleep(2)  # the proposer's call is under way: a 135M model takes seconds
            server.kill()
            done = running.completed(300)
        finally:
            processes.close()
        assert done.returncode == 0, done.stderr[-2000:]
        statuses = [c["status"] for c in consultations(ws)]
        assert set(statuses) <= {"completed", "unavailable", "timeout"}, statuses
        assert {"unavailable", "timeout"} & set(statuses), statuses
        assert accepted(ws, "depot-a"), "the planner's item survives the dead server"

        server.start()
        depot(ws, "depot-b", saving=120000)
        cooled = {**MODEL_ENV, "PORTFOLIO_OPTIMISER_REASONING_COOLDOWN_SECONDS": "0"}
        again = run_cli("once", ws, env=cooled, timeout_s=300)
        assert again.returncode == 0, again.stderr[-2000:]
        assert provenance(ws, "depot-b")["proposer"] == ADVISOR  # heard again after the restart
        advisors = json.loads(run_cli("advisors", ws, "--json", env=cooled).stdout)
        [state] = [a for a in advisors["advisors"] if a["id"] == ADVISOR]
        assert state["status"] == "available" and not state["recovering"], state
    finally:
        server.stop()


def test_a_server_that_ignores_the_cap_field_is_held_to_the_cap(
    tmp_path: Path, llama: LlamaServer
) -> None:
    # A server of its own: one that ignores the cap goes on generating after the client gave up
    # (llama-cpp-python does not stop on disconnect), and the other tests must not queue behind.
    # Its context is short, and a call has the default 120 s: an answer the model does not end
    # itself stops at the context's end in time even beside the other worker's tests. With
    # 8 192 tokens and 30 s a call, a run whose two answers rambled timed out on both, and no
    # answer past the cap was seen.
    server = LlamaServer(llama.model, tmp_path, n_ctx=3072).start()
    ws = make_workspace(tmp_path / "ws")
    # llama-cpp-python's server ignores max_completion_tokens: told to send only that field, the
    # product sees answers past the cap, and records them as the server's fault.
    model_config(
        ws,
        server.base_url,
        options={"output_cap_field": "max_completion_tokens"},
        propose_output_tokens=4,
        check_output_tokens=4,
    )
    depot(ws, "depot-c")
    try:
        done = run_cli("once", ws, env=MODEL_ENV, timeout_s=600)
    finally:
        server.kill()
    assert done.returncode == 0, done.stderr[-2000:]
    over = [c for c in consultations(ws) if "ignores the cap field" in (c["diagnostic"] or "")]
    assert over and all(c["status"] == "error" for c in over)
    assert accepted(ws, "depot-c")


def test_whatever_the_model_answers_in_prompt_mode_ends_as_a_recorded_outcome(
    tmp_path: Path, llama: LlamaServer
) -> None:
    ws = make_workspace(tmp_path / "ws")
    model_config(ws, llama.base_url, options={"structured_output": "prompt"})
    depot(ws, "depot-d")
    done = run_cli("once", ws, env=MODEL_ENV, timeout_s=300)
    assert done.returncode == 0, done.stderr[-2000:]
    proposer = [c for c in consultations(ws) if c["question"].startswith("Subject: savings in")]
    assert proposer and {c["status"] for c in proposer} <= {"completed", "malformed", "empty"}
    for candidate in proposals(ws, "depot-d")["candidates"]:
        assert candidate["validator"]["outcome"] in {"accepted", "rejected"}
    assert any(c["origin"] == "measure-option:k-01" for c in proposals(ws, "depot-d")["candidates"])


# -- the daemon under a flapping server --------------------------------------------------------


@pytest.mark.loadbearing
def test_the_daemon_stays_up_through_a_flapping_server_and_every_bundle_ends_done(
    tmp_path: Path, llama: LlamaServer
) -> None:
    server = LlamaServer(llama.model, tmp_path).start()
    ws = make_workspace(tmp_path / "ws")
    model_config(ws, server.base_url)  # 120 s a call: the recovering call answers in time
    env = {**MODEL_ENV, "PORTFOLIO_OPTIMISER_REASONING_COOLDOWN_SECONDS": "4"}
    processes = Processes(tmp_path / "proc")

    def done_count() -> int:
        return sum(1 for item in ledger_items(ws, "bundle") if item.state == "done")

    def status() -> dict[str, Any]:
        data: dict[str, Any] = json.loads(run_cli("status", ws, "--json", env=env).stdout)
        [state] = [a for a in data["advisors"]["states"] if a["id"] == ADVISOR]
        return state

    try:
        daemon = processes.start("run", ws, env=env)
        depot(ws, "flap-1")
        wait_for(lambda: done_count() == 1, 240, interval_s=0.5, what="flap-1 done (server up)")
        server.kill()
        depot(ws, "flap-2", saving=130000)
        wait_for(lambda: done_count() == 2, 240, interval_s=0.5, what="flap-2 done (server down)")
        depot(ws, "flap-3", saving=125000)
        wait_for(lambda: done_count() == 3, 240, interval_s=0.5, what="flap-3 done (server down)")
        opened = status()
        assert opened["status"] == "temporarily_failed", opened  # the breaker is open
        server.start()
        time.sleep(4.5)  # the cooldown passes: the next answer tests the circuit
        assert status()["recovering"]
        depot(ws, "flap-4", saving=110000)
        wait_for(lambda: done_count() == 4, 240, interval_s=0.5, what="flap-4 done (server back)")
        closed = status()
        assert closed["status"] == "available" and not closed["recovering"], closed
        server.kill()
        depot(ws, "flap-5", saving=105000)
        wait_for(lambda: done_count() == 5, 240, interval_s=0.5, what="flap-5 done (down again)")
        assert daemon.popen.poll() is None, "the daemon exited"
        daemon.popen.terminate()
        assert daemon.wait(30) == 0
    finally:
        processes.close()
        server.stop()
    assert list((ws / ".state" / "claimed").iterdir()) == []
    assert provenance(ws, "flap-4")["proposer"] == ADVISOR
    assert provenance(ws, "flap-2")["ran_locally"]
