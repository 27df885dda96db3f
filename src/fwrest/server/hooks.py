"""The application hooks of SPEC 11.1: their functions resolved at start, and the two that a
worker's life runs (``OnStart``, ``OnStop``).

A thread pool section names ``OnStart``, ``OnStop``, ``OnSend`` and ``OnError``; a server
section names ``OnSelect``. Each name is resolved against the repository at start, as
``OnAuth`` is (a missing or ambiguous name, or a function that cannot be called as the hook
is, stops the start naming section and key). Where the per-request hooks plug in:
``OnSend``/``OnError`` in a route's call (:mod:`fwrest.server.hooked`, composed by
``handler.bind``), ``OnSelect`` as an admitted stage of the port's pipeline
(:mod:`fwrest.server.select`). A ``def`` hook runs in a pool's threads, an ``async def`` one on
the event loop.

Owns: the hooks' records, their resolution, ``OnStart``/``OnStop`` runs. Must not know: HTTP,
routes.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fwrest import log
from fwrest.config.model import ServerConfig, ThreadPoolConfig
from fwrest.errors import ConfigError
from fwrest.repository import Environment, Repository, is_async
from fwrest.server.failures import Raised, contained
from fwrest.server.pool import ThreadPool

__all__ = [
    "NO_HOOKS",
    "ON_STOP_LIMIT_S",
    "Hook",
    "PoolHooks",
    "StartFailed",
    "pool_hooks",
    "run_on_start",
    "run_on_stop",
    "select_hook",
]

ON_STOP_LIMIT_S = 10.0  # SPEC 11.1: OnStop keeps a stopping worker at most this long

# how each hook is called: its key as written in the SPEC -> the arguments it gets
_CALLED_AS = {
    "OnStart": "OnStart()",
    "OnStop": "OnStop()",
    "OnSend": "OnSend()",
    "OnError": "OnError(exc)",
    "OnSelect": "OnSelect()",
}


@dataclass(frozen=True, slots=True)
class Hook:
    """One hook: the function a section's key names, resolved."""

    key: str  # "OnSend", as the SPEC writes it
    section: str  # the section that names it, as written ("POOL", "HTTP_REST")
    name: str  # the function's full name, module.function
    func: Callable[..., Any]
    is_async: bool

    @property
    def label(self) -> str:
        """How log lines name it: ``OnSend app.stamp of [POOL]``."""
        return f"{self.key} {self.name} of [{self.section}]"


@dataclass(frozen=True, slots=True)
class PoolHooks:
    """The hooks of one thread pool (None: not configured)."""

    on_start: Hook | None = None
    on_stop: Hook | None = None
    on_send: Hook | None = None
    on_error: Hook | None = None

    @property
    def per_request(self) -> bool:
        """Whether a route of the pool has hooks to run around its call."""
        return self.on_send is not None or self.on_error is not None


NO_HOOKS = PoolHooks()


class StartFailed(RuntimeError):
    """An ``OnStart`` raised: the worker does not start (the traceback is logged).

    Args:
        hook: the ``OnStart`` that failed.
        exc: what it raised.
    """

    def __init__(self, hook: Hook, exc: BaseException) -> None:
        super().__init__(f"{hook.label} raised {type(exc).__name__}: {exc}")
        self.hook = hook

    def config_error(self) -> ConfigError:
        """The failed start as ``fwrest.start()`` and ``fwrest.testing.Client`` raise it."""
        return ConfigError(
            f"the service did not start: {self}.",
            section=self.hook.section,
            key=self.hook.key,
            fix="the log holds its traceback; the worker serves once every OnStart returns.",
        )


def _resolve(
    repo: Repository,
    name: str | None,
    envs: Iterable[Environment],
    *,
    key: str,
    section: str,
) -> Hook | None:
    """The hook ``key`` of ``section`` names, checked to take the arguments it is called with.

    Raises:
        ConfigError: the name is missing, ambiguous, or names a function that cannot be
            called as the hook is.
    """
    if not name:
        return None
    full, func = repo.resolve(name, envs, section=section, key=key)
    called = _CALLED_AS[key]
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        sig = None  # a builtin or an extension's function: called as it is
    if sig is not None:
        args = (None,) if key == "OnError" else ()
        try:
            sig.bind(*args)
        except TypeError as exc:
            raise ConfigError(
                f"the function {full}{sig} cannot be called as {called}: {exc}.",
                section=section,
                key=key,
                fix=f"give it the parameters {called} passes (more only with defaults).",
                source=repo.source,
            ) from None
    return Hook(key, section, full, func, is_async(func))


def pool_hooks(repo: Repository, pools: Iterable[ThreadPoolConfig]) -> dict[str, PoolHooks]:
    """The hooks of every pool that names one, by lower-case pool name, resolved against the
    pool's own environment.

    Raises:
        ConfigError: a hook's name is missing from that environment, ambiguous, or names a
            function that cannot be called as the hook is.
    """
    out: dict[str, PoolHooks] = {}
    for pool in pools:
        folded = pool.name.lower()
        if folded in out:
            continue
        names = (pool.on_start, pool.on_stop, pool.on_send, pool.on_error)
        if not any(names):
            continue
        envs = [repo.load(pool.environment)]
        found = [
            _resolve(repo, name, envs, key=key, section=pool.name)
            for key, name in zip(("OnStart", "OnStop", "OnSend", "OnError"), names, strict=True)
        ]
        out[folded] = PoolHooks(*found)
    return out


def select_hook(repo: Repository, server: ServerConfig, envs: list[Environment]) -> Hook | None:
    """A server's ``OnSelect``, resolved against the server's environments (as ``OnAuth``).

    Raises:
        ConfigError: as :func:`pool_hooks`.
    """
    return _resolve(repo, server.on_select, envs, key="OnSelect", section=server.name)


async def _call(hook: Hook, pool: ThreadPool) -> None:
    """A worker's hook with no request: ``def`` in the pool's threads (waiting for a free
    one however long: the caller bounds it, and a thread a request left behind after its
    ``ActiveTimeout`` must not cost the hook its run), ``async def`` here (its
    ``SystemExit`` carried as ``Raised``, never into the loop)."""
    await contained(hook.func() if hook.is_async else pool.submit_untimed(hook.func))


async def run_on_start(
    hooks: Mapping[str, PoolHooks], pools: Mapping[str, ThreadPool], worker: int
) -> None:
    """Every pool's ``OnStart``, in turn, before the worker accepts a request.

    Raises:
        StartFailed: one raised (logged with its traceback); the worker does not start.
    """
    for folded, found in hooks.items():
        hook = found.on_start
        if hook is None or folded not in pools:
            continue
        try:
            await _call(hook, pools[folded])
        except Exception as caught:  # SystemExit too (Raised): the start fails, saying why
            exc = caught.inner if isinstance(caught, Raised) else caught
            log.server_log.error(
                "worker %d: %s raised %s; the worker does not start",
                worker,
                hook.label,
                type(exc).__name__,
                exc_info=exc,
            )
            raise StartFailed(hook, exc) from None


async def run_on_stop(
    hooks: Mapping[str, PoolHooks], pools: Mapping[str, ThreadPool], worker: int
) -> None:
    """Every pool's ``OnStop``, in turn, after the worker's last request, all within
    :data:`ON_STOP_LIMIT_S`: one that raises is logged and the next runs; one that has not
    returned by then is left behind (its thread, or its task cancelled) and logged, and the
    worker stops without waiting for it or the ones after it."""
    stops = [(f, h.on_stop) for f, h in hooks.items() if h.on_stop is not None and f in pools]
    if not stops:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ON_STOP_LIMIT_S
    for folded, hook in stops:
        assert hook is not None
        left = deadline - loop.time()
        task = loop.create_task(_call(hook, pools[folded]))
        done, _ = await asyncio.wait({task}, timeout=max(left, 0.0))
        if not done:
            # never awaited again: a hook that swallows its cancellation cannot hold the stop
            task.cancel()
            log.server_log.error(
                "worker %d: %s did not return within %.0f s; the worker stops without it",
                worker,
                hook.label,
                ON_STOP_LIMIT_S,
            )
            return
        exc = task.exception() if not task.cancelled() else None
        if isinstance(exc, Raised):
            exc = exc.inner
        if exc is not None:
            log.server_log.error(
                "worker %d: %s raised %s", worker, hook.label, type(exc).__name__, exc_info=exc
            )
