"""sd_notify: the datagrams systemd would receive, on a socket the test binds (path and abstract)."""

from __future__ import annotations

import os
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from portfolio_optimiser.daemon.notify import (
    Notifier,
    sd_notify,
    watchdog_interval_s,
    watchdog_timeout_s,
)


class Listener:
    """A bound AF_UNIX datagram socket standing in for systemd's notification socket."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock = sock
        self.address = address  # what goes into $NOTIFY_SOCKET

    def recv(self, timeout_s: float = 2.0) -> str:
        self.sock.settimeout(timeout_s)
        return self.sock.recv(4096).decode("utf-8")

    def pending(self) -> list[str]:
        """Everything already queued, without waiting."""
        self.sock.setblocking(False)
        out: list[str] = []
        try:
            while True:
                out.append(self.sock.recv(4096).decode("utf-8"))
        except BlockingIOError:
            return out


def _path_listener(tmp_path: Path) -> Iterator[Listener]:
    directory = tmp_path
    if len(str(tmp_path / "notify")) > 100:  # sun_path holds 108 bytes
        directory = Path(tempfile.mkdtemp(prefix="sdn-"))
    path = directory / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        yield Listener(sock, str(path))
    path.unlink(missing_ok=True)


def _abstract_listener() -> Iterator[Listener]:
    name = f"portfolio-optimiser-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        yield Listener(sock, "@" + name)


@pytest.fixture(params=["path", "abstract"])
def listener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Listener]:
    if request.param == "path":
        yield from _path_listener(tmp_path)
    else:
        yield from _abstract_listener()


@pytest.fixture
def path_listener(tmp_path: Path) -> Iterator[Listener]:
    yield from _path_listener(tmp_path)


def test_ready_status_watchdog_and_stopping_arrive(listener: Listener) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": listener.address})
    assert notifier.ready("watching (inotify); pending=0")
    assert listener.recv() == "READY=1\nSTATUS=watching (inotify); pending=0"
    assert notifier.status("watching (inotify); pending=1")
    assert listener.recv() == "STATUS=watching (inotify); pending=1"
    assert notifier.watchdog()
    assert listener.recv() == "WATCHDOG=1"
    assert notifier.stopping()
    assert listener.recv() == "STOPPING=1"


def test_ready_without_status_sends_only_ready(path_listener: Listener) -> None:
    assert Notifier({"NOTIFY_SOCKET": path_listener.address}).ready()
    assert path_listener.recv() == "READY=1"


def test_sd_notify_reads_the_process_environment_by_default(
    path_listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", path_listener.address)
    assert sd_notify("READY=1")
    assert path_listener.recv() == "READY=1"


def test_unset_socket_is_a_silent_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notifier = Notifier()
    assert not notifier.ready("starting")
    assert not notifier.status("anything")
    assert not notifier.watchdog()
    assert not notifier.reloading()
    assert not notifier.stopping()
    assert not sd_notify("READY=1", environ={})


@pytest.mark.parametrize(
    "address",
    [
        "/nonexistent/dir/notify",  # the socket is gone
        "relative/notify",  # neither a path nor '@'
        "vsock:2:1234",  # a transport we do not speak
        "/",  # a directory, not a socket
    ],
)
def test_a_failed_send_returns_false_and_never_raises(address: str) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": address})
    assert not notifier.ready("x")
    assert not notifier.watchdog()
    assert not notifier.stopping()


def test_status_is_only_sent_when_it_changes(path_listener: Listener) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": path_listener.address})
    assert notifier.ready("pending=0")
    assert not notifier.status("pending=0")  # same as the READY=1 status
    assert notifier.status("pending=1")
    assert not notifier.status("pending=1")
    assert not notifier.status("pending=1")
    assert notifier.status("pending=0")
    time.sleep(0.05)
    assert path_listener.pending() == [
        "READY=1\nSTATUS=pending=0",
        "STATUS=pending=1",
        "STATUS=pending=0",
    ]


def test_status_text_cannot_add_assignments_or_control_sequences(path_listener: Listener) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": path_listener.address})
    assert notifier.status("name\nREADY=1\x1b[2J done")
    assert path_listener.recv() == "STATUS=name READY=1 done"


def test_reloading_sends_monotonic_usec(path_listener: Listener) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": path_listener.address})
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert notifier.reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    lines = path_listener.recv().split("\n")
    assert lines[0] == "RELOADING=1"
    key, value = lines[1].split("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after


def test_the_status_after_a_reload_ends_it_with_ready(path_listener: Listener) -> None:
    # systemd keeps the unit "reloading" until READY=1; a loop that only reports status must end it.
    notifier = Notifier({"NOTIFY_SOCKET": path_listener.address})
    notifier.ready("pending=0")
    assert path_listener.recv().startswith("READY=1")
    notifier.reloading()
    assert path_listener.recv().startswith("RELOADING=1")
    assert notifier.status("pending=0")  # unchanged, yet sent: it carries READY=1
    assert path_listener.recv() == "READY=1\nSTATUS=pending=0"
    assert not notifier.status("pending=0")


PID = str(os.getpid())


@pytest.mark.parametrize(
    ("environ", "timeout_s", "interval_s"),
    [
        ({}, None, None),
        ({"WATCHDOG_USEC": "60000000"}, 60.0, 30.0),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": PID}, 60.0, 30.0),
        ({"WATCHDOG_USEC": "500000"}, 0.5, 0.25),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1"}, None, None),  # another process's
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "x"}, None, None),
        ({"WATCHDOG_USEC": "abc"}, None, None),
        ({"WATCHDOG_USEC": ""}, None, None),
        ({"WATCHDOG_USEC": "0"}, None, None),
        ({"WATCHDOG_USEC": "-5"}, None, None),
        ({"WATCHDOG_PID": PID}, None, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec(
    environ: dict[str, str], timeout_s: float | None, interval_s: float | None
) -> None:
    assert watchdog_timeout_s(environ) == timeout_s
    assert watchdog_interval_s(environ) == interval_s
    assert Notifier(environ).watchdog_interval_s() == interval_s


def test_watchdog_interval_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "10000000")
    monkeypatch.setenv("WATCHDOG_PID", PID)
    assert watchdog_interval_s() == 5.0
    assert Notifier().watchdog_interval_s() == 5.0
    monkeypatch.delenv("WATCHDOG_USEC")
    assert watchdog_interval_s() is None
