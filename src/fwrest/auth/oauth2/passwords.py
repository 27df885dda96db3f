"""Password and secret checks in constant time (SPEC 7).

A stored value is plain text, an argon2 hash (``$argon2id$``/``$argon2i$``/``$argon2d$``) or a
bcrypt hash (``$2b$``/``$2a$``/``$2y$``). Plain values compare as UTF-8 bytes with
``hmac.compare_digest``. An unknown user costs one dummy check of the same kind, so that the
answer takes the same time whether the user exists or not.
"""

from __future__ import annotations

import hmac
from functools import lru_cache

import bcrypt
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

__all__ = ["dummy_check", "is_hashed", "same_secret", "verify_password"]

_argon2 = PasswordHasher()


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


@lru_cache(maxsize=8)
def _dummy_hash(kind: str, like: str) -> str:
    if kind == "argon2":
        return _argon2.hash("fwrest-dummy-password")
    if kind == "bcrypt":
        rounds = int(like.split("$")[2]) if like.count("$") >= 3 else 12
        return bcrypt.hashpw(b"fwrest-dummy-password", bcrypt.gensalt(rounds)).decode()
    return "fwrest-dummy-password"


def dummy_check(given: str, like: str) -> None:
    """Spend the time a check against a hash of ``like``'s kind would take."""
    kind = _kind(like)
    verify_password(given, _dummy_hash(kind, like if kind == "bcrypt" else ""))
