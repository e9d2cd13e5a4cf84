"""Tell systemd how the daemon is doing: the ``sd_notify`` protocol, without libsystemd.

Decides: which datagram to send and when a ``STATUS=`` is worth sending (only when it changed).
Never raises: outside systemd (``$NOTIFY_SOCKET`` unset) every call is a silent no-op, and a send
that fails (socket gone, queue full) returns ``False`` — the daemon's work never depends on it.

The protocol (systemd's own MIT-0 reference, ``man/notify-selfcontained-example.py``; "guaranteed
to be stable"): one ``AF_UNIX``/``SOCK_DGRAM`` datagram of ``KEY=value`` lines to the path in
``$NOTIFY_SOCKET``; a leading ``@`` names a socket in the abstract namespace. With
``NotifyAccess=main`` only the main process may notify, so the unit's ``ExecStart=`` must run the
console script directly, not through a wrapper.

Watchdog: systemd passes ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``); the daemon pings ``WATCHDOG=1``
at half that interval, and only while it is healthy.

Reload: ``RELOADING=1`` puts the unit into "reloading" until the next ``READY=1``. ``ready()``
ends a reload, and so does the next ``status()`` after ``reloading()``, so a loop that reports its
status every tick cannot leave systemd waiting.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

from portfolio_optimiser._text import strip_control

__all__ = [
    "Notifier",
    "sd_notify",
    "watchdog_interval_s",
    "watchdog_timeout_s",
]

_SEND_TIMEOUT_S = 1.0


def sd_notify(message: str, *, environ: Mapping[str, str] | None = None) -> bool:
    """Send one notification datagram; ``True`` when it was sent, ``False`` otherwise, never raises."""
    address = (os.environ if environ is None else environ).get("NOTIFY_SOCKET", "")
    if not address or not message or address[0] not in "/@":
        return False  # not under systemd, nothing to say, or a transport we don't speak (vsock:)
    if address[0] == "@":
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.settimeout(_SEND_TIMEOUT_S)
            sock.connect(address)
            sock.sendall(message.encode("utf-8"))
    except (OSError, ValueError):
        return False
    return True


def watchdog_timeout_s(environ: Mapping[str, str] | None = None) -> float | None:
    """systemd's ``WatchdogSec=`` in seconds, or ``None`` when no watchdog watches this process.

    ``WATCHDOG_USEC`` must be a positive integer; when ``WATCHDOG_PID`` is set it must be this
    process (a child that inherited the environment is not the one being watched).
    """
    env = os.environ if environ is None else environ
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    return usec / 1_000_000


def watchdog_interval_s(environ: Mapping[str, str] | None = None) -> float | None:
    """How often to send ``WATCHDOG=1``: half of ``WATCHDOG_USEC``, or ``None`` when unwatched."""
    timeout = watchdog_timeout_s(environ)
    return None if timeout is None else timeout / 2


def _one_line(text: str) -> str:
    # A newline would start a new KEY=value assignment: STATUS text must not smuggle READY=1 in.
    return " ".join(strip_control(text).split())


class Notifier:
    """The daemon's side of ``Type=notify``: readiness, status, watchdog, reload and stop.

    ``environ`` is read when a message is sent (default: ``os.environ``); tests pass their own.
    Every method returns whether a datagram was sent.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._last_status: str | None = None
        self._reloading = False

    def _send(self, *lines: str) -> bool:
        return sd_notify("\n".join(lines), environ=self._environ)

    def ready(self, status: str | None = None) -> bool:
        """``READY=1`` (start-up done, or a reload finished), with a ``STATUS=`` when given."""
        self._reloading = False
        if status is None:
            return self._send("READY=1")
        self._last_status = _one_line(status)
        return self._send("READY=1", f"STATUS={self._last_status}")

    def status(self, text: str) -> bool:
        """``STATUS=text``, sent only when it differs from the last one (or a reload is pending)."""
        line = _one_line(text)
        if self._reloading:
            return self.ready(line)
        if line == self._last_status:
            return False
        self._last_status = line
        return self._send(f"STATUS={line}")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the daemon is alive and making progress."""
        return self._send("WATCHDOG=1")

    def stopping(self) -> bool:
        """``STOPPING=1``: shutting down, taking no new work."""
        return self._send("STOPPING=1")

    def reloading(self) -> bool:
        """``RELOADING=1`` with ``MONOTONIC_USEC`` (CLOCK_MONOTONIC); finish with ``ready()``."""
        self._reloading = True
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self._send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def watchdog_interval_s(self) -> float | None:
        """How often to ping the watchdog (half of ``WATCHDOG_USEC``); ``None`` when unwatched."""
        return watchdog_interval_s(self._environ)
