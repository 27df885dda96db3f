"""The native HTTP engine: which engine serves (docs/engine.md, "The native engine").

``engine.pyx`` is a C extension (Cython over the llhttp release that httptools bundles,
``llhttp/``, MIT) built with the compiled wheel where a C compiler is; without it, or where
its build failed, the pure engine serves. ``FWREST_ENGINE`` chooses: ``native`` (the default:
the native engine where it was built, else the pure one, said at start) or ``pure``
(httptools); the choice is made once per process, when the engine is imported.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "ENGINE_ENV",
    "describe",
    "native_encoder",
    "native_parser",
    "selected",
    "unmet",
]

ENGINE_ENV = "FWREST_ENGINE"
_CHOICES = ("pure", "native")


def native_parser() -> Any | None:
    """The native parser's class (``RequestParser``), None where it was not built."""
    try:
        from fwrest._native.engine import RequestParser
    except ImportError:
        return None
    return RequestParser


def native_encoder() -> Any | None:
    """The native engine's reply encoder (``wire.encode_reply`` in C), None where it was not
    built."""
    try:
        from fwrest._native.engine import encode_reply
    except ImportError:
        return None
    return encode_reply


def selected() -> tuple[Any | None, str]:
    """The parser class the engine uses (None: httptools, the pure engine) and why, from
    ``FWREST_ENGINE``; an unknown value is a ValueError naming the ones there are."""
    asked = os.environ.get(ENGINE_ENV, "").strip().lower()
    wanted = asked or "native"
    if wanted not in _CHOICES:
        raise ValueError(f"{ENGINE_ENV}={wanted!r} is no engine: use {' or '.join(_CHOICES)}")
    if wanted == "pure":
        return None, f"pure (httptools; {ENGINE_ENV}=pure)"
    parser = native_parser()
    if parser is None:
        why = f"{ENGINE_ENV}=native, but" if asked else "the default,"
        return None, (
            f"pure (httptools; {why} the native engine was not built: "
            "no C compiler when fwrest was installed, or its build failed)"
        )
    from fwrest._native.engine import LLHTTP_VERSION

    return parser, f"native (llhttp {LLHTTP_VERSION}, C)"


def describe() -> str:
    """The engine that serves, as the start line and ``fwrest check`` say it (an unknown
    ``FWREST_ENGINE`` is said, and the pure engine serves)."""
    try:
        return selected()[1]
    except ValueError as exc:
        return f"pure ({exc})"


def unmet() -> bool:
    """Whether ``FWREST_ENGINE`` asks for an engine that does not serve: ``native`` where it
    was not built, or no engine at all (the start says so at WARNING, not INFO: at
    ``rest_log_level`` 2 an explicit choice that fell back would else go unsaid)."""
    asked = os.environ.get(ENGINE_ENV, "").strip().lower()
    if not asked:
        return False  # the default falls back to the pure engine quietly
    try:
        parser, _ = selected()
    except ValueError:
        return True
    return asked == "native" and parser is None
