"""The systemd units: the settings the daemon's contract relies on, and `systemd-analyze verify`."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from portfolio_optimiser.cli.workspace_arg import EX_USAGE
from portfolio_optimiser.config import EX_CONFIG

REPO = Path(__file__).resolve().parents[1]
UNITS = REPO / "systemd"
USER_UNIT = UNITS / "portfolio-optimiser.service"
SYSTEM_UNIT = UNITS / "system" / "portfolio-optimiser.service"
DROP_IN = UNITS / "hardening.conf"
CHECK_UNITS = REPO / ".ci" / "check-units"

Unit = dict[str, dict[str, list[str]]]


def parse_unit(path: Path) -> Unit:
    """systemd's INI dialect: repeated keys accumulate, '#'/';' comments, '\\' continues a line."""
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"{path}: {line!r} before any section"
        key, sep, value = line.partition("=")
        assert sep, f"{path}: {line!r} is not KEY=value"
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


def one(unit: Unit, section: str, key: str) -> str:
    values = unit.get(section, {}).get(key)
    assert values, f"[{section}] {key}= missing"
    assert len(values) == 1, f"[{section}] {key}= set {len(values)} times"
    return values[0]


@pytest.fixture(params=["user", "system"])
def unit(request: pytest.FixtureRequest) -> Unit:
    return parse_unit(USER_UNIT if request.param == "user" else SYSTEM_UNIT)


# (section, key, value) every unit must carry: the daemon-side contract of research/daemon.md §6.
CONTRACT = [
    ("Unit", "StartLimitIntervalSec", "300"),
    ("Unit", "StartLimitBurst", "5"),
    ("Service", "Type", "notify"),  # READY=1 over $NOTIFY_SOCKET
    ("Service", "NotifyAccess", "main"),
    ("Service", "WatchdogSec", "60s"),  # the daemon pings at half of WATCHDOG_USEC
    ("Service", "Restart", "on-failure"),
    # Neither a bad config nor a --workspace that names no workspace is restarted into a loop.
    ("Service", "RestartPreventExitStatus", f"{EX_CONFIG} {EX_USAGE}"),
    ("Service", "ExecReload", "/bin/kill -HUP $MAINPID"),  # SIGHUP reloads the config
    ("Service", "KillMode", "mixed"),
    ("Service", "TimeoutStopSec", "30s"),
    ("Service", "UMask", "0077"),
    ("Service", "NoNewPrivileges", "yes"),
    ("Service", "Environment", "PYTHONUNBUFFERED=1"),
]


@pytest.mark.parametrize(("section", "key", "value"), CONTRACT)
def test_each_unit_keeps_the_daemon_contract(
    unit: Unit, section: str, key: str, value: str
) -> None:
    assert one(unit, section, key) == value


def test_exec_start_runs_the_console_script_itself(unit: Unit) -> None:
    # NotifyAccess=main: a wrapper (sh -c, uv run, env) would be the main process and READY=1 lost.
    program, *args = shlex.split(one(unit, "Service", "ExecStart"))
    assert program.endswith("/portfolio-optimiser")
    assert program.startswith(("/", "%h/"))
    assert args[:2] == ["run", "--workspace"]
    assert len(args) == 3
    assert not args[2].startswith("/tmp")  # PrivateTmp would hide it


def test_the_daemon_state_stays_in_the_workspace(unit: Unit) -> None:
    # The daemon keeps its state in $STATE_DIRECTORY when set, else <workspace>/.state. Set, the
    # service and a shell's `portfolio-optimiser status|once` would use two ledgers and two locks,
    # and a sandboxed state directory is a mount of its own: claim-by-rename would fail (EXDEV).
    service = unit["Service"]
    if "StateDirectory" in service:
        unset = [v for line in service.get("UnsetEnvironment", []) for v in line.split()]
        assert "STATE_DIRECTORY" in unset


def test_the_user_unit_runs_from_the_home_directory() -> None:
    unit = parse_unit(USER_UNIT)
    assert one(unit, "Service", "ExecStart") == (
        "%h/.local/bin/portfolio-optimiser run --workspace %h/portfolio-optimiser"
    )
    assert "User" not in unit["Service"]
    assert one(unit, "Install", "WantedBy") == "default.target"


def test_the_system_unit_runs_as_its_own_account_in_its_state_directory() -> None:
    unit = parse_unit(SYSTEM_UNIT)
    assert one(unit, "Service", "User") == "portfolio"
    workspace = shlex.split(one(unit, "Service", "ExecStart"))[-1]
    assert workspace == "/var/lib/" + one(unit, "Service", "StateDirectory")
    assert one(unit, "Service", "StateDirectoryMode") == "0700"
    assert one(unit, "Install", "WantedBy") == "multi-user.target"


SANDBOX = [
    ("ProtectSystem", "strict"),
    ("PrivateTmp", "yes"),
    ("PrivateDevices", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("RestrictNamespaces", "yes"),
    ("LockPersonality", "yes"),
    ("SystemCallArchitectures", "native"),
    ("MemoryDenyWriteExecute", "yes"),
    ("CapabilityBoundingSet", ""),
]


@pytest.mark.parametrize(("key", "value"), SANDBOX)
def test_the_system_unit_is_sandboxed(key: str, value: str) -> None:
    assert one(parse_unit(SYSTEM_UNIT), "Service", key) == value


def test_the_system_unit_allows_only_the_address_families_it_needs() -> None:
    families = one(parse_unit(SYSTEM_UNIT), "Service", "RestrictAddressFamilies").split()
    assert sorted(families) == ["AF_INET", "AF_INET6", "AF_UNIX"]


def test_the_system_unit_can_write_its_workspace() -> None:
    service = parse_unit(SYSTEM_UNIT)["Service"]
    workspace = shlex.split(one({"Service": service}, "Service", "ExecStart"))[-1]
    writable = ["/var/lib/" + d for d in service["StateDirectory"]]
    writable += [p.lstrip("-") for v in service.get("ReadWritePaths", []) for p in v.split()]
    assert any(workspace == w or workspace.startswith(w + "/") for w in writable)
    if service["ProtectHome"] == ["yes"]:
        # /home is then inaccessible, and a ReadWritePaths= inside it cannot be mounted
        assert not any(w.startswith(("/home", "/root", "%h")) for w in writable)
    else:
        assert service["ProtectHome"] == ["read-only"]


def test_the_hardening_drop_in_needs_user_namespaces_and_says_so() -> None:
    drop_in = parse_unit(DROP_IN)
    assert list(drop_in) == ["Service"]
    assert one(drop_in, "Service", "PrivateUsers") == "yes"
    assert one(drop_in, "Service", "ProtectSystem") == "strict"
    assert one(drop_in, "Service", "ProtectHome") == "read-only"
    user_workspace = shlex.split(one(parse_unit(USER_UNIT), "Service", "ExecStart"))[-1]
    writable = [p.lstrip("-") for p in one(drop_in, "Service", "ReadWritePaths").split()]
    assert user_workspace in writable
    text = DROP_IN.read_text(encoding="utf-8")
    assert "AppArmor" in text
    assert "systemd-run --user -p PrivateUsers=yes --wait true" in text


def test_the_worker_unit_runs_a_worker_on_the_shared_database() -> None:
    worker = parse_unit(UNITS / "portfolio-optimiser-worker.service")
    program, *args = shlex.split(one(worker, "Service", "ExecStart"))
    assert program == "%h/.local/bin/portfolio-optimiser"
    assert args[:2] == ["worker", "--workspace"] and len(args) == 3
    assert one(worker, "Service", "Type") == "simple"  # no inbox, no READY=1
    # The database's URL (and its password) from a file of the user's, not from the config.
    assert one(worker, "Service", "EnvironmentFile").startswith("%h/")
    assert one(worker, "Service", "RestartPreventExitStatus") == f"{EX_CONFIG} {EX_USAGE}"
    assert one(worker, "Service", "Restart") == "on-failure"


def test_the_readme_says_how_to_install_check_and_reload() -> None:
    readme = (UNITS / "README.md").read_text(encoding="utf-8")
    for needle in (
        "systemctl --user daemon-reload",
        "systemctl --user enable --now portfolio-optimiser",
        "systemctl --user status portfolio-optimiser",
        "journalctl --user -u portfolio-optimiser",
        "systemctl --user reload portfolio-optimiser",
        "loginctl enable-linger",
        "sudo systemctl enable --now portfolio-optimiser",
        "journalctl -u portfolio-optimiser",
        "AppArmor",
    ):
        assert needle in readme, needle


def test_check_units_is_an_executable_bash_script() -> None:
    # .ci/run calls it by path: the executable bit must survive the commit
    assert os.access(CHECK_UNITS, os.X_OK)
    assert CHECK_UNITS.read_text(encoding="utf-8").startswith("#!/usr/bin/env bash\n")


needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (apt-get install systemd); .ci/check-units "
    "installs it when it runs in CI",
)


def _check_units(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CHECK_UNITS)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


@needs_analyze
def test_check_units_verifies_every_unit() -> None:
    result = _check_units()
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    for label in ("ok   user unit", "ok   user unit + drop-in", "ok   system unit"):
        assert label in result.stdout


@pytest.mark.loadbearing
@needs_analyze
@pytest.mark.parametrize(
    ("target", "old", "new"),
    [
        # a warning systemd-analyze prints but, without --recursive-errors, exits 0 on
        ("portfolio-optimiser.service", "WatchdogSec=60s", "WatchdogSec=abc"),
        ("hardening.conf", "PrivateUsers=yes", "PrivateUsers=yes\nFooBar=1"),
        # systemd 252 does not know notify-reload (253+)
        ("system/portfolio-optimiser.service", "Type=notify", "Type=notify-reload"),
        ("portfolio-optimiser-worker.service", "Type=simple", "Type=simple\nFooBar=1"),
    ],
)
def test_check_units_fails_on_any_warning(tmp_path: Path, target: str, old: str, new: str) -> None:
    broken = tmp_path / "systemd"
    shutil.copytree(UNITS, broken)
    path = broken / target
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    result = _check_units({"CHECK_UNITS_DIR": str(broken)})
    assert result.returncode != 0, result.stdout
    assert "FAIL" in result.stderr
