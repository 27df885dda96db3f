"""The one path normaliser (SPEC 7): ``split_target`` and ``normalise_path``."""

from __future__ import annotations

import pytest

from fwrest.routing import BadPath, normalise_path, split_target


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (b"/", ("/", "")),
        (b"/a/b", ("/a/b", "")),
        (b"/a/b?x=1&y=2", ("/a/b", "x=1&y=2")),
        (b"/a?", ("/a", "")),
        (b"/a?x=1?y", ("/a", "x=1?y")),
        (b"/a/%2Fb?q=%2F", ("/a/%2Fb", "q=%2F")),  # split only; decoding is normalise_path's
        (b"http://example.com/a/b?x=1", ("/a/b", "x=1")),
        (b"HTTPS://Example.COM:8443/a", ("/a", "")),
        (b"http://example.com", ("/", "")),
        (b"http://example.com?x=1", ("/", "x=1")),
        (b"https://user@example.com:1/a/b/?q", ("/a/b/", "q")),
    ],
)
def test_split_target(target: bytes, expected: tuple[str, str]) -> None:
    assert split_target(target) == expected


@pytest.mark.parametrize(
    "target",
    [
        b"*",
        b"a/b",
        b"example.com/a",
        b"ftp://example.com/a",
        b"/caf\xc3\xa9",  # raw non-ASCII bytes
        b"/a#frag",
        b"",
    ],
)
def test_split_target_refuses(target: bytes) -> None:
    with pytest.raises(BadPath):
        split_target(target)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", "/"),
        ("/a", "/a"),
        ("/a/", "/a"),
        ("//", "/"),
        ("/rest//items/./7", "/rest/items/7"),
        ("/rest/%69tems/7", "/rest/items/7"),
        ("/rest/x/../items/7", "/rest/items/7"),
        ("/rest/users/a/../1/", "/rest/users/1"),
        ("/a/b/..", "/a"),
        ("/a/.", "/a"),
        ("/a/..", "/"),
        ("/a/%2e%2e/b", "/b"),  # an encoded dot segment is a dot segment
        ("/a/%2E/b", "/a/b"),
        ("/a/.b/..c/...", "/a/.b/..c/..."),  # only exactly "." and ".." are special
        ("/.well-known/x", "/.well-known/x"),
        ("/items/7;x", "/items/7;x"),  # ";" is an ordinary character
        ("/a%20b", "/a b"),
        ("/caf%C3%A9", "/café"),
        ("/a%2541", "/a%41"),  # decoded once only
        ("/a+b", "/a+b"),  # "+" is not a space in a path
        ("/A/B", "/A/B"),  # case is kept
    ],
)
def test_normalise_path(path: str, expected: str) -> None:
    assert normalise_path(path) == expected


def test_normalising_twice_changes_nothing_without_escapes() -> None:
    for path in ("/rest//items/./7", "/a/b/../c/", "/x/.y/z"):
        once = normalise_path(path)
        assert normalise_path(once) == once


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/a%2Fb", "encoded slash"),
        ("/a%2fb", "encoded slash"),
        ("/a%5Cb", "encoded slash"),  # a backslash is refused the same way
        ("/a%00b", "NUL"),
        ("/a%0Ab", "control character"),
        ("/a%7F", "control character"),
        ("/a\x01b", "control character"),
        ("/a%ff", "UTF-8"),  # invalid UTF-8
        ("/a%C3", "UTF-8"),  # truncated sequence
        ("/a%C0%AF", "UTF-8"),  # overlong "/"
        ("/a%ED%A0%80", "UTF-8"),  # a surrogate
        ("/a%", "bad percent escape"),
        ("/a%4", "bad percent escape"),
        ("/a%zz", "bad percent escape"),
        ("/a%-1", "bad percent escape"),
        ("/..", "above /"),
        ("/../a", "above /"),
        ("/a/../../b", "above /"),
        ("/%2e%2e/a", "above /"),
        ("/a/%2E%2E/%2e%2E/b", "above /"),
    ],
)
def test_normalise_path_refuses(path: str, reason: str) -> None:
    with pytest.raises(BadPath, match=reason):
        normalise_path(path)


def test_bad_path_is_a_value_error() -> None:
    assert issubclass(BadPath, ValueError)
