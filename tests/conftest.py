"""Shared test fixtures. No test reaches the network or needs a credential.

The first is held, not hoped for: every socket a test opens in this process may connect only to
the loopback range (127.0.0.0/8, ::1) or a Unix socket; anything else is refused before a packet
leaves. Subprocesses (the daemon, the llama.cpp server) are started on 127.0.0.1 by the tests.
"""

from __future__ import annotations

import importlib
import ipaddress
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .daemon_helpers import PYCACHE_PREFIX

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "shared" / "examples"

# The runner may forbid bytecode files (PYTHONDONTWRITEBYTECODE): then every test process compiled
# each module it imports from source again (10 s of a collection), and so did every interpreter
# a test starts. As for the daemon's subprocesses (daemon_helpers.cli_env), bytecode
# goes to the tests' own cache, never into the tree.
if sys.dont_write_bytecode:
    sys.pycache_prefix = str(PYCACHE_PREFIX)
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(PYCACHE_PREFIX)

# Tests run on two xdist workers (addopts: -n auto --dist loadgroup). A unit that must stay on one
# worker is an xdist group, sent first so that the longest units start at once:
# - the tests marked real_model share one llama.cpp server (test_real_model's module fixture),
#   and each of them makes the model busy on both cores: on two workers they would be two servers
#   slowing each other down;
# - the tests marked postgres share the session's PostgreSQL, started once;
# - the tests of a module that share a module or class fixture, which is built once, not per worker.
_FIRST_GROUPS = ("real_model", "postgres")


def _shares_a_fixture_with_its_module(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        fixture.scope in ("module", "class", "package")
        for fixtures in info.name2fixturedefs.values()
        for fixture in fixtures
    )


def _xdist_group(item: pytest.Item) -> str | None:
    for name in _FIRST_GROUPS:
        if item.get_closest_marker(name) is not None:
            return name
    if _shares_a_fixture_with_its_module(item):
        return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[str, str | None] = {}
    for item in items:
        group = _xdist_group(item)
        groups[item.nodeid] = group
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    # The same order on every worker (xdist requires one collection); a stable sort keeps each
    # module's tests together and in their order.
    order = {name: rank for rank, name in enumerate(_FIRST_GROUPS)}
    items.sort(key=lambda item: order.get(groups[item.nodeid] or "", len(order)))


@pytest.fixture(autouse=True)
def _no_ambient_reasoning_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # CI sets CI=true; tests that depend on the mode pin it themselves.
    monkeypatch.delenv("PORTFOLIO_OPTIMISER_REASONING_MODE", raising=False)


class NetworkRefused(RuntimeError):
    """A test tried to reach an address outside the loopback range."""


def _loopback(address: Any) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return str(host) == "localhost"


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def refuse(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
            raise NetworkRefused(f"a test tried to reach {address!r}; tests use 127.0.0.1 only")

    def connect(sock: socket.socket, address: Any) -> None:
        refuse(sock, address)
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        refuse(sock, address)
        return real_connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


@pytest.fixture(autouse=True)
def _dbos_ends_with_the_test() -> Iterator[None]:
    """DBOS is one per process: a test that launched it on its workspace stops it."""
    yield
    if "portfolio_optimiser.daemon.durable" in sys.modules:
        # Imported again, it waits for an import another thread has under way (a job a stop left
        # in hand may still be loading DBOS) before its engine is stopped.
        importlib.import_module("portfolio_optimiser.daemon.durable").stop_engine()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A real PostgreSQL on 127.0.0.1, started once for the session (``tests/postgres.py``)."""
    from .postgres import start_postgres

    yield from start_postgres()
