"""Import an environment's ``Repository`` and resolve function names named in configuration."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import pkgutil
import signal
import site
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwrest.config.model import EnvironmentConfig
from fwrest.errors import ConfigError
from fwrest.repository.decorators import (
    Endpoint,
    RouteError,
    forget,
    normalise_route,
    registered,
)
from fwrest.repository.scopes import scope_list

__all__ = ["Environment", "Repository", "endpoint_path", "purge_modules"]

_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def endpoint_path(path: str) -> str:
    """Normalise a route path as the decorators do (exposed for ``LoadURNs``)."""
    return normalise_route(path)


@dataclass(slots=True)
class Environment:
    """The modules an environment imported and the endpoints they annotated."""

    name: str
    modules: frozenset[str]
    endpoints: tuple[Endpoint, ...]
    everything: bool = False  # no Repository: the calling program's endpoints


@dataclass(slots=True)
class Repository:
    """Every environment of a service, imported once, and the functions it can name."""

    base_dir: Path
    source: str | None = None
    environments: dict[str, Environment] = field(default_factory=dict)
    _entry_modules: dict[str, frozenset[str]] = field(default_factory=dict)
    _named: set[str] = field(default_factory=set)  # the modules the entries name themselves

    def load(self, env: EnvironmentConfig) -> Environment:
        """Import the environment's modules (once per service) and collect its endpoints."""
        if env.name.lower() in self.environments:
            return self.environments[env.name.lower()]
        if not env.repository:
            loaded = Environment(env.name, frozenset(), registered(), everything=True)
        else:
            modules: set[str] = set()
            for entry in env.repository:
                modules |= self._import_entry(env, entry)
            endpoints = tuple(e for e in registered() if e.module in modules)
            loaded = Environment(env.name, frozenset(modules), endpoints)
        self.environments[env.name.lower()] = loaded
        return loaded

    # -- importing --------------------------------------------------------------------------

    def _import_entry(self, env: EnvironmentConfig, entry: str) -> frozenset[str]:
        key = entry.strip()
        if key in self._entry_modules:
            return self._entry_modules[key]
        before = set(sys.modules)
        target = Path(key)
        if not target.is_absolute():
            target = self.base_dir / target
        names: list[str]
        if key.endswith(".py"):
            if not target.is_file():
                raise self._error(
                    env,
                    f"the file {target} does not exist.",
                    "give a module name, a .py file or a folder.",
                )
            names = [self._import_file(env, target)]
        elif target.is_dir() and not (target / "__init__.py").is_file():
            names = [self._import_file(env, p) for p in sorted(target.glob("*.py"))]
        elif target.is_dir() and not all(part.isidentifier() for part in key.split(".")):
            # a package folder given by its path (lib/pkg, ./pkg): import it from its parent
            self._ensure_path(target.resolve().parent)
            names = self._import_module(env, target.resolve().name)
        else:
            names = self._import_module(env, key)
        new = {n for n in set(sys.modules) - before}
        self._named.update(names)
        result = frozenset(new | set(names))
        self._entry_modules[key] = result
        return result

    def _ensure_path(self, folder: Path) -> None:
        text = str(folder)
        if text not in sys.path:
            sys.path.insert(0, text)

    def _import_file(self, env: EnvironmentConfig, path: Path) -> str:
        self._ensure_path(path.parent)
        name = path.stem
        existing = sys.modules.get(name)
        if existing is not None:
            existing_file = getattr(existing, "__file__", None)
            if existing_file and Path(existing_file).resolve() != path.resolve():
                raise self._error(
                    env,
                    f"the file {path} would be imported as module {name!r}, but a module "
                    f"of that name is already loaded from {existing_file}.",
                    "rename the file or name its package instead.",
                )
            return name
        self._run_import(env, name, str(path))
        return name

    def _import_module(self, env: EnvironmentConfig, name: str) -> list[str]:
        self._ensure_path(self.base_dir)
        module = self._run_import(env, name, name)
        names = [name]
        if hasattr(module, "__path__"):  # a package: import its submodules too
            for info in pkgutil.walk_packages(module.__path__, prefix=f"{name}."):
                self._run_import(env, info.name, info.name)
                names.append(info.name)
        return names

    def _run_import(self, env: EnvironmentConfig, name: str, shown: str) -> Any:
        with _stop_signals() as stopped:
            try:
                return importlib.import_module(name)
            except BaseException as exc:
                if stopped:  # Ctrl-C or SIGTERM while it imported: the process stops
                    raise
                raise self._import_error(env, name, shown, exc) from None

    def _import_error(
        self, env: EnvironmentConfig, name: str, shown: str, exc: BaseException
    ) -> ConfigError:
        """What a module that failed to import raised, as a one-line error: whatever it raised
        (``sys.exit()``, ``KeyboardInterrupt`` would end a start without a word, a reload with
        the supervisor: SPEC 1, 13.1)."""
        if isinstance(exc, ModuleNotFoundError):
            if exc.name and (exc.name == name or name.startswith(exc.name + ".")):
                return self._error(
                    env,
                    f"the module {shown!r} was not found (looked in {self.base_dir} "
                    "and the Python path).",
                    "give a module name, a .py file or a folder relative to the config file.",
                )
            return self._error(
                env,
                f"importing {shown!r} failed: {_short(exc)}",
                "install the missing package or fix the import.",
            )
        if isinstance(exc, RouteError):
            return self._error(
                env, f"importing {shown!r} failed: {exc}.", "fix the route path in the annotation."
            )
        if isinstance(exc, Exception):
            return self._error(
                env,
                f"importing {shown!r} failed: {_short(exc)}",
                "fix the module; `python -c 'import ...'` shows the same error.",
            )
        if isinstance(exc, SystemExit):
            return self._error(
                env,
                f"importing {shown!r} failed: it called sys.exit({exc.code!r}).",
                "do not exit at import time; move that code under if __name__ == '__main__'.",
            )
        return self._error(
            env,
            f"importing {shown!r} failed: it raised {_short(exc)}, which is no Exception.",
            "do not raise KeyboardInterrupt or another BaseException at import time; raise an "
            "Exception, or move that code under if __name__ == '__main__'.",
        )

    def _error(self, env: EnvironmentConfig, problem: str, fix: str) -> ConfigError:
        return ConfigError(
            problem, section=env.name or None, key="Repository", fix=fix, source=self.source
        )

    def own_modules(self) -> dict[str, Path]:
        """The repository's own modules and their source files: what a reload imports afresh
        and ``--reload`` watches (SPEC 13.1, 13.2).

        The modules the entries name, and the modules their import brought in from outside
        the interpreter's and the installed packages' folders (helpers beside the handlers);
        not a compiled extension (it cannot be imported twice), not a module without a file.
        """
        out: dict[str, Path] = {}
        installed = _installed_folders()
        for env in self.environments.values():
            for name in env.modules:
                file = getattr(sys.modules.get(name), "__file__", None)
                if not file or file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
                    continue
                if name in self._named or not _within(Path(file), installed):
                    out[name] = Path(file).resolve()
        return out

    # -- names --------------------------------------------------------------------------------

    def functions(
        self, envs: Iterable[Environment]
    ) -> dict[str, list[tuple[str, Callable[..., Any]]]]:
        """Functions defined in the environments' modules: lower-cased name -> [(full, fn)]."""
        index: dict[str, list[tuple[str, Callable[..., Any]]]] = {}
        seen: set[str] = set()
        modules: set[str] = set()
        for env in envs:
            modules |= env.modules if not env.everything else _program_modules()
        for mod_name in sorted(modules):
            module = sys.modules.get(mod_name)
            if module is None:
                continue
            for attr, value in vars(module).items():
                if attr.startswith("__") or not callable(value) or inspect.isclass(value):
                    continue
                if getattr(value, "__module__", None) != mod_name:
                    continue
                full = f"{mod_name}.{attr}"
                if full in seen:
                    continue
                seen.add(full)
                index.setdefault(full.lower(), []).append((full, value))
                index.setdefault(attr.lower(), []).append((full, value))
        return index

    def resolve(
        self,
        name: str,
        envs: Iterable[Environment],
        *,
        section: str,
        key: str,
        what: str = "function",
    ) -> tuple[str, Callable[..., Any]]:
        """Find the function a config value names (``module.fn`` or a unique bare name).

        Raises:
            ConfigError: the name is missing or matches functions of several modules.
        """
        index = self.functions(envs)
        found = index.get(name.strip().lower(), [])
        if len(found) == 1:
            return found[0]
        if not found:
            raise ConfigError(
                f"the {what} {name!r} is not in the repository of this server's environments.",
                section=section,
                key=key,
                fix="define it in a module listed in the environment's Repository, and name "
                "it as module.function or by its unique name.",
                source=self.source,
            )
        options = ", ".join(sorted(full for full, _ in found))
        raise ConfigError(
            f"the {what} name {name!r} is ambiguous: it matches {options}.",
            section=section,
            key=key,
            fix="name it as module.function.",
            source=self.source,
        )

    def _urns_error(self, section: str, problem: str, fix: str) -> ConfigError:
        return ConfigError(problem, section=section, key="LoadURNs", fix=fix, source=self.source)

    def mapped_endpoints(
        self, load_urns: dict[str, Any], envs: list[Environment], *, section: str
    ) -> list[Endpoint]:
        """The endpoints of a server's ``LoadURNs`` mapping."""
        out: list[Endpoint] = []
        for path, methods in load_urns.items():
            try:
                normalised = normalise_route(path)
            except RouteError as exc:
                raise self._urns_error(
                    section, f"{exc}.", "write paths such as /items/:id."
                ) from None
            if not isinstance(methods, dict):
                raise self._urns_error(
                    section,
                    f"the path {path!r} must map to an object of methods.",
                    'write {"GET": {"Function": "module.function"}}.',
                )
            for method, spec in methods.items():
                verb = str(method).upper()
                if verb not in _METHODS:
                    raise self._urns_error(
                        section,
                        f"{method!r} under {path!r} is not a method fwrest serves.",
                        f"use one of {', '.join(_METHODS)}.",
                    )
                fields = (
                    {str(k).lower(): v for k, v in spec.items()} if isinstance(spec, dict) else {}
                )
                fn_name = fields.get("function")
                if not isinstance(fn_name, str) or not fn_name.strip():
                    raise self._urns_error(
                        section,
                        f"{verb} {path!r} names no Function.",
                        'write {"Function": "module.function"}.',
                    )
                full, func = self.resolve(fn_name, envs, section=section, key="LoadURNs")
                try:
                    scopes = scope_list(fields.get("scopes", []), f"{verb} {path!r} Scopes")
                except ValueError as exc:
                    raise self._urns_error(
                        section,
                        f"{exc}.",
                        'write "Scopes": ["orders:read"], names without spaces or quotes.',
                    ) from None
                out.append(
                    Endpoint(
                        method=verb,
                        path=normalised,
                        func=func,
                        description=str(fields.get("description") or ""),
                        source="mapping",
                        module=full.rsplit(".", 1)[0],
                        function=full,
                        # the path as written: two entries of one mapping can collide
                        origin=f'[{section}] LoadURNs "{path}" {method}',
                        scopes=scopes,
                    )
                )
        return out


def purge_modules(modules: dict[str, Path]) -> Callable[[], None]:
    """Remove ``modules`` from ``sys.modules`` (and their routes and cached bytecode), so that
    the next :meth:`Repository.load` imports them afresh; returns what puts them back.

    The bytecode goes because Python trusts a ``.pyc`` whose source kept its size and the
    second of its modification time: an edit within that second would import the old code.
    """
    saved = {name: sys.modules.pop(name) for name in modules if name in sys.modules}
    before = set(sys.modules)
    restore_routes = forget(frozenset(modules))
    for path in modules.values():
        if path.suffix == ".py":
            with contextlib.suppress(OSError, ValueError):
                os.unlink(importlib.util.cache_from_source(str(path)))
    importlib.invalidate_caches()  # a file added since the last import is found

    def restore() -> None:
        # what the failed import brought in of the repository's goes too (not installed ones)
        installed = _installed_folders()
        for name in set(sys.modules) - before:
            file = getattr(sys.modules[name], "__file__", None)
            if name in modules or not file or _within(Path(file), installed):
                continue
            del sys.modules[name]
        for name in modules:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        restore_routes()

    return restore


def _installed_folders() -> list[Path]:
    """The interpreter's library and the installed packages' folders."""
    paths = sysconfig.get_paths()
    folders = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    folders.update(site.getsitepackages())
    folders.add(site.getusersitepackages())
    return [Path(f).resolve() for f in folders]


def _within(file: Path, folders: list[Path]) -> bool:
    path = file.resolve()
    return any(path.is_relative_to(folder) for folder in folders)


def _program_modules() -> set[str]:
    return {e.module for e in registered()}


def _short(exc: BaseException) -> str:
    """One line: the exception and where it was raised (file:line), no full traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}:{exc.lineno})"
    text = str(exc)
    return f"{type(exc).__name__}{': ' if text else ''}{text}{where}"


@contextlib.contextmanager
def _stop_signals() -> Iterator[list[int]]:
    """The stop signals (SIGINT, SIGTERM) that arrive while the body runs, each still handled
    as before (Python's Ctrl-C raises ``KeyboardInterrupt``; the supervisor's handler ends a
    reload's load): an import's ``KeyboardInterrupt`` is then a real Ctrl-C, which stops the
    process, not the module's own, which is a configuration error. Signals reach the main
    thread only: elsewhere nothing is wrapped, and nothing arrives."""
    seen: list[int] = []
    wrapped: dict[int, tuple[Any, Any]] = {}  # signal -> (its handler, the wrapper)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if callable(handler):

                def noted(num: int, frame: Any, handler: Any = handler) -> Any:
                    seen.append(num)
                    return handler(num, frame)

                wrapped[signum] = (handler, noted)
                signal.signal(signum, noted)
    try:
        yield seen
    finally:
        for number, (previous, wrapper) in wrapped.items():
            if signal.getsignal(number) is wrapper:  # else the module set its own: kept
                signal.signal(number, previous)


def is_async(func: Callable[..., Any] | None) -> bool:
    """Whether calling ``func`` gives a coroutine to await on the event loop: an ``async def``,
    also behind decorators that keep ``__wrapped__`` (``functools.wraps``) or a
    ``functools.partial``.

    >>> import functools
    >>> async def f() -> None: ...
    >>> def logged(g):
    ...     @functools.wraps(g)
    ...     def wrapper(*a, **k):
    ...         return g(*a, **k)
    ...     return wrapper
    >>> is_async(f), is_async(logged(f)), is_async(functools.partial(f)), is_async(len)
    (True, True, True, False)
    """
    for _ in range(32):  # a bounded walk: a __wrapped__ chain may loop
        if func is None:
            return False
        if inspect.iscoroutinefunction(func):
            return True
        if isinstance(func, functools.partial):
            func = func.func
        else:
            wrapped = getattr(func, "__wrapped__", None)
            func = wrapped if callable(wrapped) else None
    return False
