"""One port's keys in a worker (``portkeys.py``): a key another worker just made verifies before the
next poll (SPEC 12.1), and unknown kids cost one look at a time."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import jwt
import orjson
import pytest

from fwrest.auth.oauth2.keyset import FileKeySet, ensure, rotate
from fwrest.auth.oauth2.portkeys import PortKeys


class _CountingSource(FileKeySet):
    """The key set file, counting how often a worker looks whether it changed."""

    looks = 0

    def stamp(self) -> object:
        self.looks += 1
        time.sleep(0.02)  # a store round trip: concurrent askers overlap
        return super().stamp()


def _pair(tmp_path: Path) -> tuple[PortKeys, PortKeys, FileKeySet]:
    path = tmp_path / "keyset.json"
    entries = ensure(FileKeySet(path), {"EdDSA"})
    a = PortKeys("EdDSA", FileKeySet(path), entries)
    b = PortKeys("EdDSA", _CountingSource(path), entries)
    return a, b, FileKeySet(path)


@pytest.mark.anyio
async def test_a_key_made_elsewhere_verifies_after_one_look_before_the_next_poll(
    tmp_path: Path,
) -> None:
    a, b, shared = _pair(tmp_path)
    old = a.kid
    # twice: B holds the next key of the first rotation (published ahead of its use), not the
    # one the second makes current
    rotate(shared, {"EdDSA"})
    rotate(shared, {"EdDSA"})
    a.refresh()  # host A saw the rotations, B's poller did not yet
    assert a.kid != old
    token = a.sign({"sub": "ada", "exp": time.time() + 60}, 60)
    kid = jwt.get_unverified_header(token)["kid"]
    assert b.key_of(kid) is None
    assert await b.catch_up() is True
    key = b.key_of(kid)
    assert key is not None
    assert jwt.decode(token, key, algorithms=["EdDSA"])["sub"] == "ada"
    assert b.key_of(old) is not None, "the former key still verifies its tokens"


@pytest.mark.anyio
async def test_tokens_naming_unknown_keys_share_one_look_at_a_time(tmp_path: Path) -> None:
    _, b, _ = _pair(tmp_path)
    source = b.source
    assert isinstance(source, _CountingSource)
    source.looks = 0  # the one of the start
    changed = await asyncio.gather(*(b.catch_up() for _ in range(50)))
    assert changed == [False] * 50, "nothing changed: every asker is told so"
    # the first asker's look, then one more for those who joined it under way
    assert 1 <= source.looks <= 2, source.looks


@pytest.mark.anyio
async def test_the_key_a_rotation_makes_current_verifies_before_any_look(tmp_path: Path) -> None:
    """The next key is in the set (and the JWK Set) before the rotation that makes it current:
    a worker that has not looked since verifies its tokens at once, as a verifier that fetched
    the JWK Set before does."""
    a, b, shared = _pair(tmp_path)
    old = a.kid
    assert len(orjson.loads(b.jwks)["keys"]) == 2  # the current key and the next one
    rotated = rotate(shared, {"EdDSA"})
    a.refresh()
    assert a.kid != old
    token = a.sign({"sub": "ada", "exp": time.time() + 60}, 60)
    kid = jwt.get_unverified_header(token)["kid"]
    assert kid in {k["kid"] for k in orjson.loads(b.jwks)["keys"]}
    key = b.key_of(kid)
    assert key is not None, "the key rotated in was not held before the rotation"
    assert jwt.decode(token, key, algorithms=["EdDSA"])["sub"] == "ada"
    # one current key, one next key (new), the former key retired
    [current] = [e for e in rotated if e.current]
    [upcoming] = [e for e in rotated if e.next]
    [former] = [e for e in rotated if e.retired is not None]
    assert (current.kid, former.kid) == (kid, old) and upcoming.kid not in (kid, old)
