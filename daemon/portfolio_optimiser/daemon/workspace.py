"""The workspace layout (DESIGN §2): where each folder of the product lives, named once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["POINTER", "Workspace"]

POINTER = ".state-location"


@dataclass(frozen=True)
class Workspace:
    root: Path
    state: Path

    @classmethod
    def at(cls, root: Path, environ: Mapping[str, str] | None = None) -> Workspace:
        """``$STATE_DIRECTORY`` under systemd (its first entry), else where the daemon said it
        keeps its state (``.state-location``), else ``<workspace>/.state``.

        The pointer file is why a shell command (``status``, ``once``) and a systemd service
        agree on one ledger and one lock for the same workspace.
        """
        environ = os.environ if environ is None else environ
        root = root.resolve()
        given = environ.get("STATE_DIRECTORY", "").split(":")[0].strip()
        if given:
            return cls(root=root, state=Path(given).resolve())
        pointer = root / POINTER
        if pointer.is_file():
            recorded = pointer.read_text(encoding="utf-8").strip()
            if recorded and Path(recorded).is_dir():
                return cls(root=root, state=Path(recorded))
        return cls(root=root, state=root / ".state")

    def _install_schemas(self) -> None:
        """A copy of the schemas in the workspace, so every ``$schema`` the daemon writes is a
        short relative path an editor resolves (``../../shared/schemas/…`` from inbox/verdicts/)."""
        from portfolio_optimiser._atomic import publish_atomic
        from portfolio_optimiser.resources import commons_dir

        target = self.root / "shared" / "schemas"
        for source in sorted((commons_dir() / "schemas").glob("*.json")):
            data = source.read_bytes()
            copy = target / source.name
            if not copy.is_file() or copy.read_bytes() != data:
                publish_atomic(copy, data)

    def remember_state(self) -> None:
        """Write the pointer when the state lives outside the workspace (under systemd)."""
        pointer = self.root / POINTER
        if self.state == self.root / ".state":
            return
        from portfolio_optimiser._atomic import publish_text

        if not pointer.is_file() or pointer.read_text(encoding="utf-8").strip() != str(self.state):
            publish_text(pointer, f"{self.state}\n")

    @property
    def inbox_projects(self) -> Path:
        return self.root / "inbox" / "projects"

    @property
    def inbox_verdicts(self) -> Path:
        return self.root / "inbox" / "verdicts"

    @property
    def outbox(self) -> Path:
        return self.root / "outbox"

    @property
    def failed(self) -> Path:
        return self.outbox / "failed"

    @property
    def duplicates(self) -> Path:
        return self.outbox / "duplicates"

    @property
    def spend_file(self) -> Path:
        return self.outbox / "spend.json"

    @property
    def bundles_projects(self) -> Path:
        return self.root / "bundles" / "projects"

    @property
    def references(self) -> Path:
        """Generated reference classes, beside the projects and outside the curated wiki."""
        return self.root / "bundles" / "reference"

    @property
    def wiki(self) -> Path:
        return self.root / "bundles" / "wiki"

    @property
    def claimed(self) -> Path:
        return self.state / "claimed"

    @property
    def ledger_file(self) -> Path:
        return self.state / "ledger.sqlite"

    @property
    def status_file(self) -> Path:
        return self.state / "status.json"

    def published_folders(self) -> tuple[Path, ...]:
        """The folders the product publishes single files in (written beside their names, then
        renamed): where a process killed in between leaves a temporary file. A run's folders are
        published whole, and swept apart (``sweep_stale``); the reasoning store sweeps its own."""
        return (
            self.root,
            self.root / "shared" / "schemas",
            self.inbox_verdicts,
            self.outbox,
            self.failed,
            self.duplicates,
            self.references,
            self.wiki,
            self.wiki / "verdicts",
            self.state,
        )

    def ensure(self) -> None:
        for folder in (
            self.inbox_projects,
            self.inbox_verdicts,
            self.outbox,
            self.bundles_projects,
            self.wiki,
            self.state,
            self.claimed,
        ):
            folder.mkdir(parents=True, exist_ok=True)
        self._install_schemas()
        index = self.wiki / "index.md"
        if not index.exists():
            from portfolio_optimiser._atomic import publish_text

            publish_text(
                index, "# Wiki\n\nExpert-approved verdicts, promoted by portfolio-optimiser.\n"
            )
