"""Password and secret checks in constant time (SPEC 7).

A stored value is plain text, an argon2 hash (``$argon2id$``/``$argon2i$``/``$argon2d$``) or a
bcrypt hash (``$2b$``/``$2a$``/``$2y$``). Plain values compare as UTF-8 bytes with
``hmac.compare_digest``.

The answer takes the same time whether the user exists or not, and whichever kind of password
a user has (SPEC 7.1): :func:`check_user` makes one check per kind of password the port's
users have (a kind is plain text, or a hash algorithm with its cost parameters: argon2's
memory, time and parallelism, bcrypt's rounds). The user's own password is checked in its
kind's turn; every other kind gets a check of a dummy hash with the same parameters. So every
check costs the same, at least what the most expensive kind configured costs, for a known user
(whatever the kind of their password), a wrong password and an unknown user alike.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from functools import lru_cache

import bcrypt
from argon2 import PasswordHasher, Type, extract_parameters
from argon2.exceptions import Argon2Error as ArgonError
from argon2.exceptions import InvalidHashError, VerificationError

__all__ = [
    "check_user",
    "costly",
    "dummy_check",
    "hash_password",
    "is_hashed",
    "malformed_hash",
    "same_secret",
    "signature",
    "verify_password",
]

_argon2 = PasswordHasher()


def hash_password(password: str) -> str:
    """An argon2id hash of ``password`` with the library's default costs, as
    :func:`verify_password` checks it (``fwrest users``, SPEC 13.6)."""
    return _argon2.hash(password)


def same_secret(given: str, expected: str) -> bool:
    """Constant-time equality of two secrets, as UTF-8 bytes."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def _kind(stored: str) -> str:
    if stored.startswith("$argon2"):
        return "argon2"
    if stored.startswith(("$2b$", "$2a$", "$2y$")):
        return "bcrypt"
    return "plain"


def is_hashed(stored: str) -> bool:
    """True for an argon2 or bcrypt hash (slow to check), False for a plain-text password."""
    return _kind(stored) != "plain"


# a bcrypt hash: its variant, its cost (04-31), 22 characters of salt and 31 of hash
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")


def malformed_hash(stored: str) -> str | None:
    """The kind (``argon2``, ``bcrypt``) of hash ``stored`` begins as but is not (a placeholder
    such as ``$argon2id$...``, a hash cut short): no password can match it. None for a hash
    whose form is valid and for plain text.

    >>> malformed_hash("$argon2id$..."), malformed_hash("$2b$12$short"), malformed_hash("pw")
    ('argon2', 'bcrypt', None)
    """
    kind = _kind(stored)
    if kind == "argon2":
        try:
            extract_parameters(stored)
        except (InvalidHashError, ValueError):
            return kind
        return None
    if kind == "bcrypt" and _BCRYPT.fullmatch(stored) is None:
        return kind
    return None


def verify_password(given: str, stored: str) -> bool:
    """True when ``given`` matches ``stored`` (plain or hashed); never raises for bad input."""
    kind = _kind(stored)
    if kind == "plain":
        return same_secret(given, stored)
    raw = given.encode("utf-8")
    if kind == "argon2":
        try:
            return _argon2.verify(stored, raw)
        except (VerificationError, InvalidHashError):
            return False
    if len(raw) > 72:
        # bcrypt reads 72 bytes at most and bcrypt 5 refuses more: a plain mismatch (SPEC 7)
        bcrypt.checkpw(b"x", stored.encode())  # same cost as a real check
        return False
    try:
        return bcrypt.checkpw(raw, stored.encode("utf-8"))
    except ValueError:
        return False


_DUMMY = "fwrest-dummy-password"


def signature(stored: str) -> str:
    """What a check of ``stored`` costs: ``plain``, ``argon2:<type>:<version>:<memory>:<time>:
    <parallelism>:<hash length>:<salt length>`` or ``bcrypt:<rounds>`` (``argon2``/``bcrypt``
    alone for a hash whose parameters cannot be read: the library's defaults).

    >>> signature("secret"), signature("$2b$04$" + "a" * 53)
    ('plain', 'bcrypt:4')
    """
    kind = _kind(stored)
    if kind == "argon2":
        try:
            p = extract_parameters(stored)
        except (InvalidHashError, ValueError):
            return "argon2"
        return (
            f"argon2:{p.type.name}:{p.version}:{p.memory_cost}:{p.time_cost}:"
            f"{p.parallelism}:{p.hash_len}:{p.salt_len}"
        )
    if kind == "bcrypt":
        parts = stored.split("$")
        if len(parts) >= 3 and parts[2].isdigit() and 4 <= int(parts[2]) <= 31:
            return f"bcrypt:{int(parts[2])}"
        return "bcrypt"
    return "plain"


@lru_cache(maxsize=32)
def _dummy_for(sig: str) -> str:
    """A hash of a dummy password that costs what a hash of signature ``sig`` costs."""
    if sig.startswith("argon2:"):
        _, kind, _version, memory, passes, lanes, hash_len, salt_len = sig.split(":")
        try:
            hasher = PasswordHasher(
                time_cost=int(passes),
                memory_cost=int(memory),
                parallelism=int(lanes),
                hash_len=int(hash_len),
                salt_len=int(salt_len),
                type=Type[kind],
            )
            return hasher.hash(_DUMMY)
        except (ArgonError, KeyError, ValueError):
            pass  # parameters no hash can have (its own check fails at once): the defaults
        return _argon2.hash(_DUMMY)
    if sig == "argon2":
        return _argon2.hash(_DUMMY)
    if sig.startswith("bcrypt"):
        cost = int(sig.partition(":")[2] or 12)
        return bcrypt.hashpw(_DUMMY.encode(), bcrypt.gensalt(cost)).decode()
    return _DUMMY


@lru_cache(maxsize=16)
def _signatures(stored: tuple[str, ...]) -> tuple[str, ...]:
    """The kinds of password among ``stored``, each once, plain text always among them (its
    constant-time comparison is the check of a plain password)."""
    return tuple(dict.fromkeys(["plain", *(signature(s) for s in stored)]))


def costly(users: Sequence[tuple[str, str]]) -> bool:
    """Whether checking a password of these users costs a hash check (milliseconds of CPU:
    run it off the event loop)."""
    return len(_signatures(tuple(password for _, password in users))) > 1


def check_user(users: Sequence[tuple[str, str]], username: str, given: str) -> bool:
    """Whether ``username`` is among ``users`` with the password ``given``, at the same cost
    for every user name and password (see the module's docstring)."""
    stored = None
    for known, known_password in users:
        # every entry is compared, so the time does not depend on which one matches
        if same_secret(username, known) and stored is None:
            stored = known_password
    own = signature(stored) if stored is not None else None
    ok = False
    for sig in _signatures(tuple(password for _, password in users)):
        if sig == own and stored is not None:
            ok = verify_password(given, stored)
        else:
            verify_password(given, _dummy_for(sig))
    return ok


def dummy_check(given: str, like: str) -> None:
    """Spend the time a check against a hash of ``like``'s kind and parameters would take."""
    verify_password(given, _dummy_for(signature(like)))
