"""Builders for the daemon's integration tests: workspaces, pollers, a notify socket, subprocesses.

Everything here waits with a deadline and a short poll, never with a fixed long sleep, and
everything that starts something (a socket thread, a subprocess) has a matching close that the
test fixtures always call. Subprocesses run ``python -m portfolio_optimiser`` with the test's own
interpreter, in the reasoning mode ``ci`` (no advisor is ever consulted, whatever is installed), so
no test needs a model or the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "shared" / "examples" / "portfolio"
DEFAULT_CONFIG = REPO / "config" / "portfolio-optimiser.toml"

# Variables of the test runner that would change what a daemon subprocess does.
_SCRUBBED_ENV = (
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "STATE_DIRECTORY",
    "CONFIGURATION_DIRECTORY",
    "PORTFOLIO_OPTIMISER_TEST_FAULT",
    "PORTFOLIO_OPTIMISER_REASONING_MODE",
    "PORTFOLIO_OPTIMISER_DATABASE_URL",
)


def _catalogue_credentials() -> frozenset[str]:
    """The credential variables the default catalogue names, read from the config, so no test
    names one itself: a daemon subprocess never sees a configured advisor."""
    import tomllib

    config = tomllib.loads(DEFAULT_CONFIG.read_text("utf-8"))
    return frozenset(
        name for advisor in config.get("advisors", []) for name in advisor.get("credential_env", [])
    )


# The runner may forbid bytecode files (PYTHONDONTWRITEBYTECODE): then every subprocess compiles
# the whole package again, seconds each. Bytecode goes to a cache of its own, never into the tree.
PYCACHE_PREFIX = Path(tempfile.gettempdir()) / f"portfolio-optimiser-tests-pycache-{os.getuid()}"

T = TypeVar("T")


# -- waiting ---------------------------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], T], timeout_s: float, *, interval_s: float = 0.05, what: str = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy; return that, or fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or predicate}")
        time.sleep(interval_s)


# -- workspaces ------------------------------------------------------------------------------------


def service_on(root: Path, *, tick_s: float) -> tuple[Any, Any]:
    """A fresh workspace under ``root`` and an in-process daemon (``Service``) on it, whose
    bundles settle after 0.1 s; the caller pins the reasoning mode in the environment."""
    import structlog

    from portfolio_optimiser.config import load_config
    from portfolio_optimiser.daemon.service import Service
    from portfolio_optimiser.daemon.workspace import Workspace

    ws = Workspace.at(root / "ws", environ={})
    ws.ensure()
    config = load_config()
    daemon = config.daemon.model_copy(update={"stability_seconds": 0.1})
    service = Service(
        ws,
        None,
        config.model_copy(update={"daemon": daemon}),
        log=structlog.get_logger("t"),
        tick_s=tick_s,
    )
    return ws, service


def make_workspace(
    root: Path,
    *,
    stability_seconds: float = 0.3,
    verdict_quiet_seconds: float = 0.3,
    rescan_seconds: float = 1,
) -> Path:
    """A workspace with its config (the packaged default, daemon timings shortened) and inbox."""
    text = DEFAULT_CONFIG.read_text(encoding="utf-8")
    for key, value in (
        ("stability_seconds", stability_seconds),
        ("verdict_quiet_seconds", verdict_quiet_seconds),
        ("rescan_seconds", rescan_seconds),
    ):
        text, count = re.subn(rf"(?m)^{key} = \S+", f"{key} = {value}", text)
        assert count == 1, f"the default config has no single '{key} =' line to override"
    config = root / "config" / "portfolio-optimiser.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text, encoding="utf-8")
    (root / "inbox" / "projects").mkdir(parents=True, exist_ok=True)
    (root / "inbox" / "verdicts").mkdir(parents=True, exist_ok=True)
    return root


def copy_example(example: str, dest: Path) -> Path:
    """Copy an example bundle folder to ``dest`` (which must not exist)."""
    shutil.copytree(EXAMPLES / example, dest)
    return dest


def move_bundle_in(example: str, workspace: Path, staging: Path, name: str | None = None) -> Path:
    """Build the bundle outside the inbox (same file system), then rename it in: it arrives whole."""
    staged = copy_example(example, staging / f"{name or example}-{secrets.token_hex(3)}")
    target = workspace / "inbox" / "projects" / (name or example)
    staged.rename(target)
    return target


def write_atomically(path: Path, data: bytes) -> None:
    """Save like a careful editor: a hidden temporary beside the file, then one rename."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    temp.write_bytes(data)
    temp.replace(path)


def age_tree(path: Path, seconds: float) -> None:
    """Set every mtime under ``path`` (and ``path`` itself) ``seconds`` into the past."""
    stamp = time.time() - seconds
    for folder, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.utime(Path(folder) / name, (stamp, stamp), follow_symlinks=False)
    os.utime(path, (stamp, stamp))


# -- looking at results ----------------------------------------------------------------------------


def run_folders(workspace: Path, project_id: str) -> list[Path]:
    folder = workspace / "outbox" / "runs" / project_id
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir())


def published_runs(workspace: Path, project_id: str) -> list[Path]:
    """Run folders that hold a published proposals.json (hidden work folders excluded)."""
    return [
        p
        for p in run_folders(workspace, project_id)
        if not p.name.startswith(".") and (p / "proposals.json").is_file()
    ]


def spend_runs(workspace: Path, project_id: str) -> list[dict[str, Any]]:
    spend = workspace / "outbox" / "spend.json"
    if not spend.is_file():
        return []
    data = json.loads(spend.read_text(encoding="utf-8"))
    return [run for run in data["runs"] if run["project_id"] == project_id]


def ledger_items(workspace: Path, kind: str | None = None) -> list[Any]:
    from portfolio_optimiser.daemon.ledger import Ledger

    with Ledger.open(workspace / ".state" / "ledger.sqlite") as ledger:
        items = ledger.items()
    return [item for item in items if kind is None or item.kind == kind]


def leftovers(workspace: Path) -> list[Path]:
    """``.tmp-*`` work folders or files anywhere in the workspace."""
    return sorted(p for p in workspace.rglob(".tmp-*"))


def unparseable_json(root: Path) -> list[str]:
    """Every ``.json`` under ``root`` that does not parse, with the reason."""
    bad = []
    for path in sorted(root.rglob("*.json")):
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError) as exc:
            bad.append(f"{path}: {exc}")
    return bad


# -- the systemd notify socket ---------------------------------------------------------------------


class NotifyReceiver:
    """A datagram socket standing in for systemd's ``$NOTIFY_SOCKET``; a thread collects messages.

    Bound in ``directory`` when the path fits in ``sun_path`` (108 bytes), else in the abstract
    namespace (``@…``), which the daemon supports too. Always ``close()`` it.
    """

    def __init__(self, directory: Path) -> None:
        path = directory / "notify.sock"
        self._path: Path | None = None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if len(os.fsencode(path)) < 100:
            self.sock.bind(str(path))
            self._path = path
            self.address = str(path)
        else:
            name = f"portfolio-optimiser-test-{secrets.token_hex(8)}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        self.sock.settimeout(0.05)
        self._messages: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._receive, name="notify-receiver", daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._messages.append((time.monotonic(), data.decode("utf-8", "replace")))

    def timed(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self._messages)

    def messages(self) -> list[str]:
        return [message for _, message in self.timed()]

    def with_line(self, line: str) -> list[tuple[float, str]]:
        """Messages (with their arrival time) that contain ``line`` as one of their lines."""
        return [(t, m) for t, m in self.timed() if line in m.split("\n")]

    def wait_for_line(self, line: str, timeout_s: float, *, count: int = 1) -> list[str]:
        found = wait_for(
            lambda: len(self.with_line(line)) >= count and self.with_line(line),
            timeout_s,
            what=f"{count}× {line!r} on the notify socket (got {self.messages()!r})",
        )
        return [m for _, m in found]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
        if self._path is not None:
            self._path.unlink(missing_ok=True)


def assignments(message: str) -> dict[str, str]:
    """``KEY=value`` lines of one notify datagram as a dict."""
    return dict(line.split("=", 1) for line in message.split("\n") if "=" in line)


# -- subprocesses ----------------------------------------------------------------------------------


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    hidden = _SCRUBBED_ENV + tuple(_catalogue_credentials())
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE_PREFIX)
    env["PYTHONUNBUFFERED"] = "1"
    env["PORTFOLIO_OPTIMISER_REASONING_MODE"] = "ci"  # never a model, whatever is installed
    env.update(extra or {})
    return env


def cli_args(command: str, workspace: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "portfolio_optimiser",
        command,
        "--workspace",
        str(workspace),
        *args,
    ]


def run_cli(
    command: str,
    workspace: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run one CLI command to completion and capture its output."""
    return subprocess.run(
        cli_args(command, workspace, *args),
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@dataclass
class Running:
    """A CLI subprocess whose stdout and stderr go to files (they never fill a pipe)."""

    popen: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stdout(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def wait(self, timeout_s: float) -> int:
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"pid {self.pid} still running after {timeout_s} s; stderr:\n{self.stderr()[-2000:]}"
            ) from None

    def completed(self, timeout_s: float) -> subprocess.CompletedProcess[str]:
        code = self.wait(timeout_s)
        return subprocess.CompletedProcess(self.popen.args, code, self.stdout(), self.stderr())


@dataclass
class Processes:
    """Starts CLI subprocesses and, at ``close()``, kills every one still running."""

    directory: Path
    started: list[Running] = field(default_factory=list)

    def start(
        self, command: str, workspace: Path, *args: str, env: Mapping[str, str] | None = None
    ) -> Running:
        number = len(self.started)
        self.directory.mkdir(parents=True, exist_ok=True)
        out = self.directory / f"{number:02d}-{command}.stdout"
        err = self.directory / f"{number:02d}-{command}.stderr"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            popen = subprocess.Popen(
                cli_args(command, workspace, *args),
                env=cli_env(env),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )
        running = Running(popen, out, err)
        self.started.append(running)
        return running

    def start_daemon(
        self, workspace: Path, notify: NotifyReceiver | None = None, **env: str
    ) -> Running:
        """``run`` with a test-bound ``NOTIFY_SOCKET`` and a 2 s watchdog (a ping every ~1 s)."""
        extra = {"WATCHDOG_USEC": "2000000", **env}
        if notify is not None:
            extra["NOTIFY_SOCKET"] = notify.address
        return self.start("run", workspace, env=extra)

    def close(self) -> None:
        for running in self.started:
            if running.popen.poll() is None:
                running.popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                running.popen.wait(timeout=10)


def processes_in(directory: Path) -> Iterator[Processes]:
    """Fixture body: a :class:`Processes` that is always cleaned up."""
    processes = Processes(directory)
    try:
        yield processes
    finally:
        processes.close()


def config_with_local_server(path: Path, base_url: str) -> Path:
    """The packaged default with its local OpenAI-compatible advisor pointed at ``base_url``
    directly (``options.base_url``), so no test names the variable a user would set."""
    text = DEFAULT_CONFIG.read_text("utf-8")
    start = text.index('id = "openai-compatible-local"')
    end = text.index("[[advisors]]", start)
    block = re.sub(r"(?m)^credential_env = .*\n", "", text[start:end])
    block, count = re.subn(
        r"(?m)^options = \{ base_url_env = \"\w+\"",
        f'options = {{ base_url = "{base_url}"',
        block,
    )
    assert count == 1, "the default's local advisor changed shape"
    path.write_text(text[:start] + block + text[end:], encoding="utf-8")
    return path


def project_in_inbox(tmp_path: Path, project: str) -> tuple[Path, Processes]:
    """A workspace with the example ``project`` in its inbox, and a place to start the CLI from."""
    ws = make_workspace(tmp_path / "ws")
    copy_example(project, ws / "inbox" / "projects" / project)
    return ws, Processes(tmp_path / "proc")


def die_at(
    processes: Processes,
    ws: Path,
    fault: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
) -> None:
    """``once`` killed by the test fault hook at ``fault``; fails unless the hook fired."""
    dying = processes.start(
        "once", ws, *args, env={**(env or {}), "PORTFOLIO_OPTIMISER_TEST_FAULT": fault}
    )
    assert dying.wait(timeout_s) == -signal.SIGKILL, dying.stderr()[-2000:]
