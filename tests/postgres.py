"""A real PostgreSQL for the tests, started by the tests (research/scale.md): Debian's server
binaries, ``initdb`` as the ``postgres`` user when the tests run as root (it refuses root), a
private port on 127.0.0.1 and a socket folder of its own. Without the server binaries the tests
that need it skip and say why; under ``CI=true`` that is a failure, never a skip."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["PostgresServer", "find_bin", "start_postgres"]


def find_bin() -> Path | None:
    """The newest Debian PostgreSQL ``bin`` folder, else the one ``initdb`` on PATH is in."""
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1].parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    bin: Path
    root: Path
    port: int
    as_user: list[str]

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database on the server; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def stop(self) -> None:
        self._pg_ctl("-m", "fast", "stop")


def start_postgres() -> Iterator[PostgresServer]:
    bin_dir = find_bin()
    if bin_dir is None:
        reason = (
            "PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI installs them, so this is a failure, not a skip")
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="po-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to the postgres user
        shutil.chown(root, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    server = PostgresServer(bin_dir, root, _free_port(), as_user)
    initdb = [str(bin_dir / "initdb"), "--auth=trust", "--no-sync", "-U", "postgres"]
    init = subprocess.run(
        [*as_user, *initdb, "-D", str(root / "data")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert init.returncode == 0, init.stderr
    started = server._pg_ctl(
        "-o",
        f"-p {server.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off",
        "-l",
        str(root / "pg.log"),
        "-w",
        "start",
    )
    assert started.returncode == 0, started.stderr + (root / "pg.log").read_text(errors="replace")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
