"""Starting a service: ``fwrest serve`` (supervisor and workers) and ``fwrest.start()``."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fwrest import log
from fwrest.config import ServiceConfig, load_config
from fwrest.errors import ConfigError
from fwrest.repository import registered
from fwrest.server.binding import bind_all
from fwrest.server.build import ServicePlan, build_plan, open_runtime
from fwrest.server.supervisor import run_supervisor
from fwrest.server.worker import Worker, new_loop

__all__ = ["Service", "prepare", "serve", "start"]


def prepare(source: str | Path | Mapping[str, Any]) -> ServicePlan:
    """Load, validate and compile a service without binding (``fwrest check``)."""
    config = load_config(source)
    return build_plan(config)


def _log_warnings(config: ServiceConfig) -> None:
    for warning in config.warnings:
        log.server_log.warning("%s", warning)


def serve(source: str | Path, workers: int = 1) -> int:
    """Run a service in this process as the supervisor of ``workers`` workers.

    Raises:
        ConfigError: before anything binds, or when a port cannot be bound.
    """
    preload_modules()  # the calling program's endpoints, under start(config, workers=N)
    plan = prepare(source)
    config = plan.config
    _setup_logging(config, own_process=True)
    _log_warnings(config)
    open_runtime(plan)
    for warning in plan.warnings:
        log.server_log.warning("%s", warning)
    plan, sockets = bind_all(plan)
    log.server_log.info("starting %d worker(s) for %s", workers, config.source or "a dict")
    return run_supervisor(plan, sockets, workers)


def _setup_logging(config: ServiceConfig, *, own_process: bool) -> None:
    """fwrest's log handlers; a ``LogFile`` that cannot be opened is a configuration error
    (the loader probed it; this catches what changed since)."""
    try:
        log.setup_logging(config.tunables.rest_log_level, config.log_file, own_process=own_process)
    except OSError as exc:
        raise ConfigError(
            f"the log file {config.log_file} cannot be written: {exc.strerror or exc}.",
            section="HTTPSERVER",
            key="LogFile",
            fix="give a file in a folder the service may write to (relative to the config file).",
        ) from None


class Service:
    """A running service started by :func:`start`; :meth:`stop` ends it."""

    def __init__(self) -> None:
        self.plan: ServicePlan | None = None
        self.urls: list[str] = []
        self.ports: dict[str, int] = {}  # server section -> bound port
        self._worker: Worker | None = None
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._tmp: str | None = None

    def stop(self, timeout: float = 35.0) -> None:
        """Stop gracefully: stop accepting, finish requests in flight, return."""
        worker, thread = self._worker, self._thread
        if worker is not None and thread is not None and worker.loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                worker.loop.call_soon_threadsafe(worker.request_stop)
            thread.join(timeout)
            self._worker = self._thread = None
            log.remove_handlers()
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._process = None
        if self._tmp is not None:
            Path(self._tmp).unlink(missing_ok=True)
            self._tmp = None

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(config: str | Path | Mapping[str, Any], *, workers: int | None = None) -> Service:
    """Start a service and return once it serves (SPEC 2, 9).

    With ``workers`` unset, the service runs in this process on a background thread and
    installs no signal handlers. With ``workers=N`` the supervisor runs as a child process
    (``fwrest serve CONFIG --workers N``).

    Raises:
        ConfigError: the configuration is invalid, or a port cannot be bound.
    """
    service = Service()
    if workers is not None:
        return _start_supervisor(service, config, workers)
    plan = prepare(config)
    _setup_logging(plan.config, own_process=False)
    _log_warnings(plan.config)
    open_runtime(plan)
    for warning in plan.warnings:
        log.server_log.warning("%s", warning)
    plan, sockets = bind_all(plan)
    service.plan = plan
    service.urls = [u for port in plan.ports for u in port.urls()]
    service.ports = {port.config.name: port.config.port for port in plan.ports}
    worker = Worker(plan, sockets)
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        loop = new_loop()
        try:
            loop.run_until_complete(worker.run(ready.set))
        except BaseException as exc:
            failure.append(exc)
            ready.set()
        finally:
            for sock in sockets:
                sock.close()
            loop.close()

    thread = threading.Thread(target=run, name="fwrest-service", daemon=True)
    service._worker, service._thread = worker, thread
    thread.start()
    ready.wait(30)
    if failure:
        raise failure[0]
    return service


PRELOAD_ENV = "FWREST_PRELOAD"  # modules the supervisor imports first (start(workers=N))


def _child_env(plan: ServicePlan) -> dict[str, str] | None:
    """The environment of ``fwrest serve`` started by ``start(config, workers=N)``.

    An environment without ``Repository`` serves the calling program's endpoints (SPEC 2);
    the supervisor is a new process, so it imports their modules first (by name, on the
    caller's ``sys.path``) and its workers inherit them. A ``__main__`` script cannot be
    imported by name: that is a configuration error, not a service without those routes.
    """
    if all(env.repository for env in plan.config.environments):
        return None
    modules = sorted({e.module for e in registered() if e.origin != "fwrest"})
    if "__main__" in modules:
        raise ConfigError(
            "start(..., workers=N) runs the service in new processes, which cannot import "
            "the endpoints of the main script",
            section=next(e.name for e in plan.config.environments if not e.repository),
            key="Repository",
            fix="move the endpoints into a module and name it in Repository=, or call "
            "start() without workers.",
        )
    paths = [p or os.getcwd() for p in sys.path]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return {**os.environ, PRELOAD_ENV: ",".join(modules), "PYTHONPATH": os.pathsep.join(paths)}


def preload_modules() -> None:
    """Import the modules :func:`_child_env` names (``fwrest serve`` does it first).

    Raises:
        ConfigError: one of them cannot be imported.
    """
    for name in filter(None, os.environ.get(PRELOAD_ENV, "").split(",")):
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise ConfigError(
                f"the calling program's module {name!r} cannot be imported: {exc}",
                section="HTTPSERVER",
                key="Repository",
                fix="name the endpoints' modules in Repository=.",
            ) from None


def _start_supervisor(
    service: Service, config: str | Path | Mapping[str, Any], workers: int
) -> Service:
    if isinstance(config, Mapping):
        plan = prepare(config)  # fail here, with ConfigError, rather than in the child
        # In the working directory, so that relative paths resolve as they did in prepare().
        fd, name = tempfile.mkstemp(suffix=".json", prefix=".fwrest-start-", dir=Path.cwd())
        with os.fdopen(fd, "w") as fh:
            json.dump(config, fh)
        service._tmp = name
        path = name
    else:
        plan = prepare(config)
        path = str(config)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fwrest", "serve", path, "--workers", str(workers)],
        stdout=subprocess.PIPE,
        env=_child_env(plan),
    )
    service._process = proc
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("fwrest: serving "):
            # "fwrest: serving URL [SECTION]"
            words = line.split()
            service.urls.append(words[2])
            if len(words) > 3:
                port = urlsplit(words[2]).port
                if port is not None:
                    service.ports[words[3].strip("[]")] = port
        if line.startswith("fwrest: ready"):
            return service
    code = proc.wait()
    proc.stdout.close()
    service._process = None
    raise ConfigError(f"the service did not start (exit code {code}); see its log above.")
