"""fwrest.log: the forms a secret is scrubbed in, and the doctests of every fwrest module."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import fwrest
from fwrest import log


def test_a_secret_is_scrubbed_plain_and_url_encoded() -> None:
    forms = log.secret_forms("pa ss/w+rd")
    assert forms == ("pa ss/w+rd", "pa%20ss%2Fw%2Brd")
    line = "password=pa%20ss%2Fw%2Brd header pa ss/w+rd"
    assert log.scrub(line, forms) == "password=*** header ***"


def test_a_url_plain_secret_has_one_form() -> None:
    # a JWT's alphabet is left alone by URL encoding: nothing more to look for
    token = "eyJhbGciOi.eyJzdWIiOi-_x.c2lnbmF0dXJl~"
    assert log.secret_forms(token) == (token,)


def test_secrets_too_short_to_scrub_are_left_out() -> None:
    assert log.secret_forms("", "ab", "abc") == ("abc",)
    assert log.scrub("abc ab", log.secret_forms("ab")) == "abc ab"


def test_non_ascii_secret_is_scrubbed_in_its_utf8_percent_form() -> None:
    forms = log.secret_forms("pässwort")
    assert forms == ("pässwort", "p%C3%A4sswort")
    assert log.scrub("q=p%C3%A4sswort", forms) == "q=***"


def _with_examples() -> list[str]:
    """The fwrest modules that hold doctest examples."""
    finder = doctest.DocTestFinder()
    names = []
    for info in pkgutil.walk_packages(fwrest.__path__, "fwrest."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        if any(test.examples for test in finder.find(module)):
            names.append(info.name)
    return sorted(names)


MODULES = _with_examples()


def test_the_doctests_are_found() -> None:
    assert {"fwrest.log", "fwrest.server.app"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0, f"{name}: {result.failed} doctest(s) failed"
