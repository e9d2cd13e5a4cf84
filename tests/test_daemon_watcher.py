"""The watcher against a real file system: inotify and polling, replaying how editors save.

Events are hints (research/daemon.md §0, §2): each scenario asserts only that SOME hint for the
right top-level inbox entry arrives within a deadline — never an exact event sequence, which
differs between observers, kernels and watchdog versions. The scenario's starting state is built
before the observer starts (its baseline), so a hint can only come from the scenario itself.
"""

from __future__ import annotations

import os
import queue
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from watchdog.events import FileCreatedEvent, FileModifiedEvent, FileMovedEvent

from portfolio_optimiser.daemon import watcher as watcher_module
from portfolio_optimiser.daemon.watcher import Hint, InboxWatcher

HINT_TIMEOUT_S = 3.0
POLL_INTERVAL_S = 0.1

METHODS = [
    pytest.param(
        "inotify",
        marks=pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux"),
    ),
    "polling",
]


@dataclass(frozen=True)
class Dirs:
    projects: Path
    verdicts: Path
    outside: Path  # same file system, not watched


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    result = Dirs(
        tmp_path / "inbox" / "projects", tmp_path / "inbox" / "verdicts", tmp_path / "outside"
    )
    for folder in (result.projects, result.verdicts, result.outside):
        folder.mkdir(parents=True)
    return result


@dataclass
class Watching:
    watcher: InboxWatcher
    hints: queue.SimpleQueue[Hint]
    seen: list[Hint]

    def wait_for_hint(self, entry: Path, timeout_s: float = HINT_TIMEOUT_S) -> list[Hint]:
        """Collect hints until one names ``entry``; return every hint for it seen by then."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                hint = self.hints.get(timeout=0.05)
            except queue.Empty:
                hint = None
            if hint is not None:
                self.seen.append(hint)
            for_entry = [h for h in self.seen if h.entry == entry and h.inbox == entry.parent]
            if for_entry:
                return for_entry
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"no hint for {entry.name} within {timeout_s} s "
                    f"({self.watcher.method}); saw {[(h.entry.name, h.moved_in) for h in self.seen]}"
                )


@pytest.fixture
def watch(dirs: Dirs) -> Iterator[Callable[[str], Watching]]:
    """``watch(method)`` starts an InboxWatcher on both inbox folders; always stopped after."""
    started: list[InboxWatcher] = []

    def start(method: str) -> Watching:
        hints: queue.SimpleQueue[Hint] = queue.SimpleQueue()
        watcher = InboxWatcher(
            [dirs.projects, dirs.verdicts],
            hints,
            polling=method == "polling",
            poll_interval_s=POLL_INTERVAL_S,
        )
        started.append(watcher)
        watcher.start()
        assert watcher.method == method, f"asked for {method}, the watcher runs {watcher.method}"
        assert watcher.alive()
        return Watching(watcher, hints, [])

    yield start
    for watcher in started:
        watcher.stop()
        assert not watcher.alive()


# -- editor scenarios ------------------------------------------------------------------------------

VERDICT = b'{\n  "id": "c-0000000000000001",\n  "decision": "approved"\n}\n'
EDITED = b'{\n  "id": "c-0000000000000001",\n  "decision": "rejected"\n}\n'


def _existing_verdict(d: Dirs) -> None:
    (d.verdicts / "v.json").write_bytes(VERDICT)


def _nothing(d: Dirs) -> None:
    return None


def _write_in_place(d: Dirs) -> None:
    with (d.verdicts / "v.json").open("wb") as handle:
        handle.write(VERDICT[:10])
        handle.flush()
        handle.write(VERDICT[10:])


def _atomic_replace(d: Dirs) -> None:
    temp = d.verdicts / ".goutputstream-K3X9QZ"
    temp.write_bytes(EDITED)
    temp.rename(d.verdicts / "v.json")


def _vim_like(d: Dirs) -> None:
    swap = d.verdicts / ".v.json.swp"
    swap.write_bytes(b"vim swap")
    probe = d.verdicts / "4913"
    probe.write_bytes(b"")
    probe.unlink()
    (d.verdicts / "v.json").rename(d.verdicts / "v.json~")
    (d.verdicts / "v.json").write_bytes(EDITED)
    (d.verdicts / "v.json~").unlink()
    swap.unlink()


def _emacs_like(d: Dirs) -> None:
    lock = d.verdicts / ".#v.json"
    lock.symlink_to("tester@host.4242:1700000000")  # dangling, as emacs makes it
    autosave = d.verdicts / "#v.json#"
    autosave.write_bytes(EDITED)
    (d.verdicts / "v.json").rename(d.verdicts / "v.json~")
    (d.verdicts / "v.json").write_bytes(EDITED)
    autosave.unlink()
    lock.unlink()


def _vscode_truncate_then_write(d: Dirs) -> None:
    with (d.verdicts / "v.json").open("r+b") as handle:
        handle.truncate(0)
        handle.flush()
        os.fsync(handle.fileno())
        handle.write(EDITED)


def _bundle_outside(d: Dirs) -> None:
    bundle = d.outside / "bundle"
    (bundle / "cost").mkdir(parents=True)
    (bundle / "index.md").write_text("# Bundle\n", encoding="utf-8")
    (bundle / "cost" / "01.md").write_text("---\ntype: cost-line\n---\n", encoding="utf-8")


def _cp_r_folder(d: Dirs) -> None:
    shutil.copytree(d.outside / "bundle", d.projects / "bundle")


def _mv_folder(d: Dirs) -> None:
    (d.outside / "bundle").rename(d.projects / "bundle")


def _touch(d: Dirs) -> None:
    path = d.verdicts / "v.json"
    info = path.stat()
    # A different mtime for certain (polling compares it), bytes unchanged.
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 5_000_000_000))


@dataclass(frozen=True)
class Scenario:
    prepare: Callable[[Dirs], None]
    act: Callable[[Dirs], None]
    entry: Callable[[Dirs], Path]
    moved_in_with_inotify: bool = False


def _verdict_entry(d: Dirs) -> Path:
    return d.verdicts / "v.json"


def _bundle_entry(d: Dirs) -> Path:
    return d.projects / "bundle"


SCENARIOS = {
    "write-in-place": Scenario(_nothing, _write_in_place, _verdict_entry),
    "atomic-replace-goutputstream": Scenario(_existing_verdict, _atomic_replace, _verdict_entry),
    "vim-like": Scenario(_existing_verdict, _vim_like, _verdict_entry),
    "emacs-like": Scenario(_existing_verdict, _emacs_like, _verdict_entry),
    "vscode-truncate-then-write": Scenario(
        _existing_verdict, _vscode_truncate_then_write, _verdict_entry
    ),
    "cp-r-folder": Scenario(_bundle_outside, _cp_r_folder, _bundle_entry),
    "mv-folder-in": Scenario(
        _bundle_outside, _mv_folder, _bundle_entry, moved_in_with_inotify=True
    ),
    "touch-attrib": Scenario(_existing_verdict, _touch, _verdict_entry),
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_editor_scenario_gives_a_hint_for_its_entry(
    method: str, scenario: str, dirs: Dirs, watch: Callable[[str], Watching]
) -> None:
    case = SCENARIOS[scenario]
    case.prepare(dirs)
    watching = watch(method)
    case.act(dirs)
    hints = watching.wait_for_hint(case.entry(dirs))
    if case.moved_in_with_inotify and method == "inotify":
        assert any(h.moved_in for h in hints), (
            f"a folder renamed into the inbox must be hinted as moved in; got {hints}"
        )
    assert watching.watcher.alive()


# -- robustness ------------------------------------------------------------------------------------


def test_handler_never_raises_on_weird_events(dirs: Dirs) -> None:
    hints: queue.SimpleQueue[Hint] = queue.SimpleQueue()
    handler = watcher_module._Handler(dirs.projects, hints)
    weird: list[object] = [
        object(),  # not an event at all
        FileCreatedEvent(str(dirs.outside / "elsewhere.md")),  # outside the inbox
        FileCreatedEvent(str(dirs.projects)),  # the inbox itself
        FileCreatedEvent(12345),  # type: ignore[arg-type]  # not a path
        FileMovedEvent("", ""),
        FileMovedEvent(str(dirs.outside / "x"), 3.5),  # type: ignore[arg-type]
        FileModifiedEvent(os.fsencode(dirs.projects / "b\udcffad" / "index.md")),
    ]
    for event in weird:
        handler.on_any_event(event)  # type: ignore[arg-type]
    got = []
    while not hints.empty():
        got.append(hints.get_nowait())
    # Only the bytes path inside the inbox names an entry; nothing else produced a hint.
    assert [h.entry for h in got] == [dirs.projects / "b\udcffad"]


@pytest.mark.parametrize("method", METHODS)
def test_observer_survives_weird_events_and_keeps_hinting(
    method: str, dirs: Dirs, watch: Callable[[str], Watching]
) -> None:
    watching = watch(method)
    observer = watching.watcher._observer
    watches = [emitter.watch for emitter in observer.emitters]
    for watch_ in watches:
        for event in (
            FileCreatedEvent(str(dirs.outside / "elsewhere.md")),
            FileCreatedEvent(12345),  # type: ignore[arg-type]
            FileMovedEvent(str(dirs.outside / "x"), 3.5),  # type: ignore[arg-type]
            FileModifiedEvent(b"/not/in/the/inbox/\xff"),
        ):
            observer.event_queue.put((event, watch_))
    (dirs.verdicts / "after.json").write_bytes(VERDICT)
    watching.wait_for_hint(dirs.verdicts / "after.json")
    assert watching.watcher.alive()
    assert all(h.entry.is_relative_to(h.inbox) for h in watching.seen)


@pytest.mark.parametrize("method", METHODS)
def test_restart_gives_a_live_observer_that_hints(
    method: str, dirs: Dirs, watch: Callable[[str], Watching]
) -> None:
    watching = watch(method)
    first = watching.watcher._observer
    watching.watcher.restart()
    assert watching.watcher.alive()
    assert watching.watcher._observer is not first
    assert not first.is_alive()
    (dirs.verdicts / "after-restart.json").write_bytes(VERDICT)
    watching.wait_for_hint(dirs.verdicts / "after-restart.json")
    watching.watcher.stop()
    assert not watching.watcher.alive()
    watching.watcher.stop()  # idempotent
