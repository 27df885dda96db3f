"""Server-Sent Events (SPEC 10.5): ``EventStream`` read by Chromium's ``EventSource`` (the page a
static file of ``fwrest serve``); in process the fields, per-event compression, the idle comment."""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fwrest.testing import Client
from tests.builders import config_of
from tests.conftest import ServerProcess, local_port, module_config, serving
from tests.docs.blocks import example

APP = """
import asyncio

from fwrest import Event, EventStream, get

@get("/events")
async def events():
    async def items():
        yield "hello"
        yield Event("two\\nlines", event="note", id="2")
        yield Event("bye", event="done", id="3", retry=1000)
    return EventStream(items())

@get("/slow")
def slow():
    def items():
        import time
        for n in range(2):
            time.sleep(0.35)
            yield f"tick {n}"
    return EventStream(items())

@get("/gated")
async def gated():
    from pathlib import Path
    gate = Path(__file__).parent / "gate"
    async def items():
        yield "first"
        while not gate.exists():  # the second event waits for the test
            await asyncio.sleep(0.02)
        yield "second"
    return EventStream(items())

@get("/bad")
async def bad():
    async def items():
        yield "fine"
        yield 42
    return EventStream(items())
"""

PAGE = """<!doctype html><html><body><script>
window.received = [];
const source = new EventSource("/rest/events");
source.onmessage = (e) => window.received.push(["message", e.data, e.lastEventId]);
source.addEventListener("note", (e) => window.received.push(["note", e.data, e.lastEventId]));
source.addEventListener("done", (e) => {
  window.received.push(["done", e.data, e.lastEventId]);
  source.close();
});
</script></body></html>
"""


def events_config(folder: Path, module: str | None = None) -> Path:
    """``APP`` at ``/rest``, ``PAGE`` at ``/www``, gzip where allowed; module ``module``/``app``."""
    (folder / "www").mkdir()
    (folder / "www" / "index.html").write_text(PAGE)
    server = local_port(Locations="ROOT, WWW", Compression="gzip", CompressionMinSize=0)
    extra = {"WWW": {"Path": "/www", "ThreadPool": "POOL", "RootPath": "www"}}
    return config_of(folder, module, app=APP, servers={"HTTP_REST": server}, extra=extra)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(events_config(tmp_path_factory.mktemp("events"))) as proc:
        yield proc


def test_the_browsers_event_source_reads_the_events(browser: Any, served: ServerProcess) -> None:
    with contextlib.closing(browser.new_context()) as context:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{served.ports['HTTP_REST']}/www/index.html")
        page.wait_for_function("window.received.length >= 3", timeout=10000)
        received = page.evaluate("window.received")
    assert received == [["message", "hello", ""], ["note", "two\nlines", "2"], ["done", "bye", "3"]]


def test_the_events_are_compressed_event_by_event_where_the_location_compresses(
    served: ServerProcess,
) -> None:
    """SPEC 10.5 ("chunk by chunk, flushing each item"): event one decodes before event two."""
    url = f"http://127.0.0.1:{served.ports['HTTP_REST']}/rest/gated"
    inflate = zlib.decompressobj(31)
    seen = b""
    with httpx.stream("GET", url, headers={"Accept-Encoding": "gzip"}, timeout=10) as response:
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert response.headers["cache-control"] == "no-cache, no-transform"
        assert response.headers["content-encoding"] == "gzip"
        assert response.headers["vary"] == "Accept-Encoding"
        pieces = response.iter_raw()
        while seen != b"data: first\n\n":  # a read timeout here: the event was held back
            seen += inflate.decompress(next(pieces))
        (served.config.parent / "gate").write_text("")
        rest = b"".join(inflate.decompress(piece) for piece in pieces)
    assert rest + inflate.flush() == b"data: second\n\n"
    assert inflate.eof
    plain = httpx.get(url, headers={"Accept-Encoding": "identity"}, timeout=10)
    assert "content-encoding" not in plain.headers
    assert plain.text == "data: first\n\ndata: second\n\n"


def test_a_comment_keeps_an_idle_stream_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fwrest.server.streams.IDLE_S", 0.1)
    with Client(module_config(tmp_path, "events_app_idle", app=APP)) as client:
        text = client.get("/rest/slow").text
    assert text.count(": keep-alive\n\n") >= 2
    assert "data: tick 0\n\n" in text
    assert text.endswith("data: tick 1\n\n")


def test_an_item_that_is_no_event_cuts_the_stream(tmp_path: Path) -> None:
    with Client(module_config(tmp_path, "events_app_bad", app=APP)) as client:
        # cut after its head: the in-process client raises what httpx raises over a socket
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            client.get("/rest/bad")
        assert client.get("/rest/events").status_code == 200


def test_the_guides_event_stream_example(tmp_path: Path) -> None:
    app = example("locations-events").text
    with Client(module_config(tmp_path, "events_app_guide", app=app)) as client:
        text = client.get("/rest/prices").text
    assert text == (
        "data: open\n\n"
        "event: price\nid: 0\ndata: price 100\n\n"
        "event: price\nid: 1\ndata: price 101\n\n"
    )
