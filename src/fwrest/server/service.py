"""Starting a service: ``fwrest serve`` (supervisor and workers) and ``fwrest.start()``."""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fwrest import log
from fwrest.config import ServiceConfig, load_config
from fwrest.errors import ConfigError
from fwrest.repository import purge_modules, registered
from fwrest.server.binding import Listening, bind_all
from fwrest.server.build import ServicePlan, build_plan, open_runtime
from fwrest.server.hooks import StartFailed
from fwrest.server.pidfile import PidFileError, remove_pid_file, write_pid_file
from fwrest.server.supervisor import announce, run_supervisor, say
from fwrest.server.worker import Worker, new_loop

__all__ = ["Service", "prepare", "serve", "start"]

# Worker processes at most: the supervisor reserves each one's shared-memory slot (about 200 KB)
# at start, and each forks a full worker; a typo such as --workers 100000 ended in the kernel's
# out-of-memory killer (taking other processes with it), not in an error
MAX_WORKERS = 256
_READY_TIMEOUT_S = 30.0  # start() without workers: the worker binds nothing, so this is ample


def prepare(source: str | Path | Mapping[str, Any]) -> ServicePlan:
    """Load, validate and compile a service without binding (``fwrest check``)."""
    config = load_config(source)
    return build_plan(config)


def _log_warnings(config: ServiceConfig) -> None:
    for warning in config.warnings:
        log.server_log.warning("%s", warning)


def serve(
    source: str | Path,
    workers: int = 1,
    *,
    pid_file: str | Path | None = None,
    reload: bool = False,
) -> int:
    """Run a service in this process as the supervisor of ``workers`` workers; with 0, serve
    in this process (SPEC 13.2: a debugger's breakpoints in handlers are hit).

    ``pid_file``: this process's pid is written there while it runs (``fwrest reload``).
    ``reload``: reload when the configuration, the repository or a certificate changes.

    Raises:
        ConfigError: before anything binds, or when a port cannot be bound.
        PidFileError: ``pid_file`` cannot be written (nothing is left bound).
    """
    preload_modules()  # the calling program's endpoints, under start(config, workers=N)
    plan = prepare(source)
    config = plan.config
    _setup_logging(config, own_process=True)
    _log_warnings(config)
    open_runtime(plan)
    for warning in plan.warnings:
        log.server_log.warning("%s", warning)
    for warning in _worker_warnings(plan, workers):
        log.server_log.warning("%s", warning)
    plan, sockets = bind_all(plan)
    pid_path = Path(pid_file).resolve() if pid_file is not None else None
    if pid_path is not None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a reload before the start ends: none
        try:
            write_pid_file(pid_path)
        except PidFileError:
            for sock in sockets:
                sock.close()
            raise
    from fwrest._native import describe, unmet

    # FWREST_ENGINE (docs/engine.md): an explicit choice that cannot be met is a warning
    engine_level = logging.WARNING if unmet() else logging.INFO
    log.server_log.log(engine_level, "HTTP engine: %s", describe())
    if workers == 0:
        log.server_log.info("serving in this process for %s", config.source or "a dict")
        return _serve_here(plan, sockets, pid_path)
    log.server_log.info("starting %d worker(s) for %s", workers, config.source or "a dict")
    return run_supervisor(
        plan, sockets, workers, _Reloader(source, plan, workers, reload), pid_path
    )


class _Reloader:
    """What a reload of ``fwrest serve`` does before it forks (SPEC 13.1): the repository's
    modules out of ``sys.modules``, the configuration loaded and checked as ``fwrest check``
    does, the state store opened, the ports bound (those kept keep their sockets), the
    logging set up as at start. A failure puts the modules back and changes nothing."""

    def __init__(self, source: str | Path, plan: ServicePlan, workers: int, watch: bool) -> None:
        self.source = source
        self.workers = workers
        self.watch = watch
        # the modules in sys.modules now: the next reload imports them afresh
        self.modules = plan.repository.own_modules()
        self.config = plan.config  # the configuration the log is set up for

    def load(self, kept: Listening) -> tuple[ServicePlan, list[socket.socket]]:
        restore = purge_modules(self.modules)
        try:
            plan = prepare(self.source)
        except BaseException:
            restore()
            raise
        self.modules = plan.repository.own_modules()
        open_runtime(plan)
        sockets: list[socket.socket] = []
        try:
            plan, sockets = bind_all(plan, kept)
            _setup_logging(plan.config, own_process=True)
        except BaseException:
            for sock in sockets:
                if all(sock is not k for k in kept.values()):
                    sock.close()
            if plan.store is not None:
                plan.store.close()
            with contextlib.suppress(ConfigError):  # the log as it was, for the error
                _setup_logging(self.config, own_process=True)
            raise
        self.config = plan.config
        _log_warnings(plan.config)
        for warning in (*plan.warnings, *_worker_warnings(plan, self.workers)):
            log.server_log.warning("%s", warning)
        return plan, sockets

    def watched(self, plan: ServicePlan) -> list[Path]:
        """The configuration file and the files its values name (``FwData=oauth2.json``, a
        ``loginPage``; not an ``onAuthparams`` file, which the service reads anew at each token
        request: SPEC 13.6), the repository's files, the certificates (the state store's
        too)."""
        config = plan.config
        files = {Path(str(config.source)).resolve()} if config.source else set()
        files.update(config.files)
        files.update(plan.repository.own_modules().values())
        servers: list[Any] = [*config.servers]
        if config.monitor is not None:
            servers.append(config.monitor)
        certificates = [config.redis.ca, config.redis.cert, config.redis.key]
        for server in servers:
            tls = server.tls
            certificates += [
                server.ssl_certificate,
                server.ssl_certificate_key,
                tls.chain,
                tls.client_ca,
            ]
        for path in certificates:
            if path is not None:
                files.add(Path(path).parent.resolve() / Path(path).name)
        return sorted(files)


def _serve_here(plan: ServicePlan, sockets: list[socket.socket], pid_file: Path | None) -> int:
    """``serve --workers 0``: one worker on this process's main thread, SIGTERM and Ctrl-C
    drain it, a second one forces the stop (SPEC 7: requests still in flight are dropped, as
    the supervisor's SIGKILL drops its workers'); no supervisor, so no reload and no
    replacement."""
    worker = Worker(plan, sockets)
    loop = new_loop()
    signals = 0

    def stop() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            timeout = plan.config.graceful_timeout_ms / 1000
            say(
                f"stopping: draining requests in flight (at most {timeout:.0f} s; "
                "a second Ctrl-C forces)"
            )
            worker.request_stop()
            return
        say("second signal: forcing the stop")
        if pid_file is not None:
            remove_pid_file(pid_file)
        log.flush()  # os._exit skips logging's own shutdown
        os._exit(0)  # a handler's thread may never end: nothing else is waited for

    def ready() -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop)
        loop.add_signal_handler(signal.SIGHUP, _no_reload)
        announce(plan)
        urls = sum(len(port.urls()) for port in plan.ports)
        say(f"ready: {urls} URL(s), in this process (--workers 0), pid {os.getpid()}")

    try:
        code = loop.run_until_complete(worker.run(ready))
        say("stopped")
        return code
    finally:
        loop.close()
        for sock in sockets:
            sock.close()
        if plan.store is not None:
            plan.store.close()
        if pid_file is not None:
            remove_pid_file(pid_file)


def _no_reload() -> None:
    log.server_log.warning(
        "SIGHUP: a service started with --workers 0 does not reload; restart it, or serve "
        "with --workers 1 or more"
    )


def _worker_warnings(plan: ServicePlan, workers: int) -> list[str]:
    """Legal but probably wrong with several workers (``fwrest check`` does not know N)."""
    oauth = [p.config.name for p in plan.ports if p.auth.scheme == "oAuth2"]
    if workers < 2 or not oauth or plan.store is None or plan.store.kind != "memory":
        return []
    return [
        f"[HTTPSERVER] StateStore=memory with --workers {workers}: each worker keeps its own "
        f"refresh tokens, authorization codes and revocations, so a refresh or a code redeemed "
        f"on {', '.join(oauth)} that reaches another worker than the one that issued it fails "
        "(invalid_grant); use "
        "StateStore=sqlite (the default) or redis:// with several workers."
    ]


def _setup_logging(config: ServiceConfig, *, own_process: bool) -> None:
    """fwrest's log handlers; a ``LogFile`` that cannot be opened is a configuration error
    (the loader probed it; this catches what changed since)."""
    try:
        log.setup_logging(
            config.tunables.rest_log_level,
            config.log_file,
            own_process=own_process,
            log_format=config.log_format,
            tracing=config.tracing is not None,
        )
    except OSError as exc:
        raise ConfigError(
            f"the log file {config.log_file} cannot be written: {exc.strerror or exc}.",
            section="HTTPSERVER",
            key="LogFile",
            fix="give a file in a folder the service may write to (relative to the config file).",
        ) from None


_running: set[Service] = set()  # started by start() and not stopped yet
_running_lock = threading.Lock()


def _stop_at_exit() -> None:
    """Stop the services the program left running, gracefully, as it exits.

    An in-process service runs on a daemon thread: without this, the program's end would cut
    the requests in flight. A ``workers=N`` supervisor is a child process that would outlive
    the program, still holding the ports.
    """
    with _running_lock:
        # not in a forked child of the program: the services are its parent's
        services = [s for s in _running if s._pid == os.getpid()]
    for service in services:
        try:
            service.stop()
        except Exception:  # the next one is stopped all the same
            log.server_log.exception("stopping a service at exit failed")


atexit.register(_stop_at_exit)


def _release_logging() -> None:
    """Remove fwrest's log handlers unless another in-process service still logs with them."""
    with _running_lock:
        in_process = any(s._thread is not None for s in _running)
    if not in_process:
        log.remove_handlers()


class Service:
    """A running service started by :func:`start`; :meth:`stop` ends it.

    A service the program has not stopped is stopped gracefully when the program exits.
    """

    def __init__(self) -> None:
        self.plan: ServicePlan | None = None
        self.urls: list[str] = []
        self.ports: dict[str, int] = {}  # server section -> bound port
        self._worker: Worker | None = None
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._tmp: str | None = None
        self._pid = os.getpid()  # the process that started it

    def stop(self, timeout: float = 35.0) -> None:
        """Stop gracefully: stop accepting, finish requests in flight, return."""
        worker, thread = self._worker, self._thread
        if worker is not None and thread is not None:
            deadline = time.monotonic() + timeout
            while worker.loop is None and thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)  # stopped at once: the worker's loop is not running yet
            if worker.loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop already ended
                    worker.loop.call_soon_threadsafe(worker.request_stop)
            thread.join(timeout)
            self._worker = self._thread = None
            with _running_lock:
                _running.discard(self)
            if self.plan is not None and self.plan.store is not None:
                self.plan.store.close()
            _release_logging()
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
        with _running_lock:
            _running.discard(self)

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(config: str | Path | Mapping[str, Any], *, workers: int | None = None) -> Service:
    """Start a service and return once it serves (SPEC 2, 9).

    With ``workers`` unset, the service runs in this process on a background thread and
    installs no signal handlers. With ``workers=N`` the supervisor runs as a child process
    (``fwrest serve CONFIG --workers N``).

    A service that is still running when the program exits is stopped gracefully then.

    Raises:
        ConfigError: the configuration is invalid, a port cannot be bound, ``workers`` is not
            a whole number from 1 to ``MAX_WORKERS`` (256), or the service did not start (an ``OnStart``
            raised, for one).
    """
    if not isinstance(config, (str, Path, Mapping)):
        raise ConfigError(
            f"start(): the configuration must be a file path or a dict, got "
            f"{type(config).__name__}.",
            fix="pass the path of an .ini or .json file, or the configuration as a dict.",
        )
    service = Service()
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigError(
                f"start(): workers must be a whole number of at least 1, got {workers!r}.",
                fix="pass workers=N with N >= 1, or leave it out to serve in this process.",
            )
        if workers > MAX_WORKERS:
            raise ConfigError(
                f"start(): workers must be at most {MAX_WORKERS}, got {workers}.",
                fix="pass the number of worker processes the machine can hold (one a core).",
            )
        return _start_supervisor(service, config, workers)
    plan = prepare(config)
    level = logging.getLogger("fwrest").level  # this start's rest_log_level replaces it
    _setup_logging(plan.config, own_process=False)
    try:
        return _start_in_process(service, plan)
    except BaseException:
        if plan.store is not None:
            plan.store.close()
        _release_logging()
        logging.getLogger("fwrest").setLevel(level)  # a failed start changes nothing
        raise


def _start_in_process(service: Service, plan: ServicePlan) -> Service:
    """The rest of :func:`start` without ``workers``: bind, run the worker, wait for it."""
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
    if not ready.wait(_READY_TIMEOUT_S):
        service.stop(timeout=5)
        raise ConfigError(
            f"the service did not become ready within {_READY_TIMEOUT_S:.0f} s; see the log."
        )
    if failure:
        thread.join(5)
        failed = failure[0]
        if isinstance(failed, StartFailed):
            raise failed.config_error() from None
        raise failed
    with _running_lock:
        _running.add(service)
    return service


PRELOAD_ENV = "FWREST_PRELOAD"  # modules the supervisor imports first (start(workers=N))
PARENT_ENV = "FWREST_PARENT_PID"  # start(workers=N): the program whose end stops the supervisor


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
    plan = prepare(config)  # fail here, with ConfigError, rather than in the child
    env = _child_env(plan)
    if isinstance(config, Mapping):
        # In the working directory, so that relative paths resolve as they did in prepare().
        fd, name = tempfile.mkstemp(suffix=".json", prefix=".fwrest-start-", dir=Path.cwd())
        with os.fdopen(fd, "w") as fh:
            json.dump(config, fh)
        service._tmp = name
        path = name
    else:
        path = str(config)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fwrest", "serve", path, "--workers", str(workers)],
            stdout=subprocess.PIPE,
            # the supervisor stops when this program is gone (SIGKILL included)
            env={**(env or os.environ), PARENT_ENV: str(os.getpid())},
        )
    except BaseException:
        service.stop()  # the temporary config file
        raise
    service._process = proc
    try:
        if _wait_for_supervisor(service, proc):
            with _running_lock:
                _running.add(service)
            return service
    except BaseException:  # Ctrl-C while it starts: stop it, remove the temporary file
        service.stop(timeout=5)
        raise
    code = proc.wait()
    service.stop()  # the pipe and the temporary config file
    raise ConfigError(f"the service did not start (exit code {code}); see its log above.")


def _wait_for_supervisor(service: Service, proc: subprocess.Popen[bytes]) -> bool:
    """Read the supervisor's lifecycle lines until it is ready (True) or gone (False)."""
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
            return True
    return False
