"""Every private (or undocumented) name of aiohttp's that the gateway
relies on, checked against the aiohttp installed.

pyproject.toml pins aiohttp to the minor release these names were read
from. An upgrade that renames or removes one, or changes the signature of a
method the gateway overrides or calls, fails here by name ("aiohttp
renamed or removed RequestHandler._buffer_paused") instead of as an
AttributeError on the first request of every connection in production.
The list is kept complete by scanning the gateway's code for private names
of aiohttp's classes, and honest by finding each name where it says it is
used; proxy.server.connection's docstring names the same ones."""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from types import SimpleNamespace
from typing import Any, Literal, cast

import pytest
from aiohttp import test_utils, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_websocket import WebSocketReader
from aiohttp.web_protocol import RequestHandler

from proxy.app import handler_args
from proxy.passthrough import websockets
from proxy.server import connection
from proxy.server.connection import GatewayRunner
from proxy.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CONNECTION = "proxy/server/connection.py"
ANSWERING = "proxy/passthrough/express/answering.py"
WEBSOCKETS = "proxy/passthrough/websockets.py"
BACKPRESSURE = "proxy/passthrough/backpressure.py"
FRONT = "proxy/server/front.py"
STREAMS = "proxy/passthrough/streams.py"
RELAYING = "proxy/passthrough/relaying.py"
TEST_CONFTEST = "tests/conftest.py"

Kind = Literal["method", "coroutine", "attribute", "property", "class attribute"]


@dataclass(frozen=True)
class Internal:
    """One name of aiohttp's that the gateway uses. `parameters`: a
    method's, after self, in order (a changed signature breaks an override
    or a call); `value`: the type an attribute holds; `overridden`: the
    gateway's class that overrides it, whose signature must match."""

    owner: type
    name: str
    kind: Kind
    used_in: tuple[str, ...]
    parameters: tuple[str, ...] = ()
    value: type | tuple[type, ...] = object
    overridden: type | None = None

    @property
    def label(self) -> str:
        return f"{self.owner.__name__}.{self.name}"


_Handler = connection._RequestHandler
_Server = connection._Server

INTERNALS = (
    # aiohttp's connection handler, subclassed (proxy.server.connection): overridden...
    Internal(RequestHandler, "data_received", "method", (CONNECTION,), ("data",), overridden=_Handler),
    Internal(RequestHandler, "_handle_request", "coroutine", (CONNECTION,),
             ("request", "start_time", "request_handler"), overridden=_Handler),
    Internal(RequestHandler, "_process_keepalive", "method", (CONNECTION,), (), overridden=_Handler),
    Internal(RequestHandler, "connection_made", "method", (CONNECTION,), ("transport",), overridden=_Handler),
    Internal(RequestHandler, "connection_lost", "method", (CONNECTION,), ("exc",), overridden=_Handler),
    Internal(RequestHandler, "handle_error", "method", (CONNECTION,), ("request", "status", "exc", "message"),
             overridden=_Handler),
    # ... its state, read and written...
    Internal(RequestHandler, "_buffer_paused", "attribute", (CONNECTION,), value=bool),
    Internal(RequestHandler, "_force_close", "attribute", (CONNECTION,), value=bool),
    Internal(RequestHandler, "_close", "attribute", (CONNECTION,), value=bool),
    Internal(RequestHandler, "_loop", "attribute", (CONNECTION,), value=asyncio.AbstractEventLoop),
    Internal(RequestHandler, "_keepalive_timeout", "attribute", (CONNECTION,), value=(int, float)),
    Internal(RequestHandler, "_next_keepalive_close_time", "attribute", (CONNECTION,), value=float),
    Internal(RequestHandler, "transport", "attribute", (CONNECTION, ANSWERING), value=type(None)),
    # ... its flow control: reading paused for the lane's waiting bytes, writing waited on...
    Internal(RequestHandler, "_pause_reading_for_buffer", "method", (CONNECTION,)),
    Internal(RequestHandler, "_resume_reading_for_buffer", "method", (CONNECTION,)),
    Internal(RequestHandler, "writing_paused", "property", (ANSWERING, BACKPRESSURE)),
    Internal(RequestHandler, "_drain_helper", "coroutine", (ANSWERING, BACKPRESSURE)),
    # ... and the rest of what is called on it.
    Internal(RequestHandler, "force_close", "method", (CONNECTION,)),
    Internal(RequestHandler, "log_exception", "method", (CONNECTION,), ("args", "kw")),
    Internal(RequestHandler, "set_parser", "method", (WEBSOCKETS,), ("parser", "data_received_cb")),
    Internal(RequestHandler, "keep_alive", "method", (WEBSOCKETS,), ("val",)),
    # The server that makes the handlers, and the runner that makes the server.
    Internal(web.Server, "__call__", "method", (CONNECTION,), (), overridden=_Server),
    Internal(web.Server, "_kwargs", "attribute", (CONNECTION,), value=dict),
    Internal(web.Server, "_loop", "attribute", (CONNECTION,), value=asyncio.AbstractEventLoop),
    Internal(web.AppRunner, "_make_server", "coroutine", (CONNECTION,), (), overridden=GatewayRunner),
    # A request's connection and writer: how much of an answer has gone.
    Internal(web.BaseRequest, "writer", "property", (CONNECTION, FRONT, STREAMS)),
    Internal(web.BaseRequest, "protocol", "property", (WEBSOCKETS,)),
    Internal(AbstractStreamWriter, "output_size", "class attribute", (CONNECTION, FRONT, STREAMS), value=int),
    # The relay's answers hold their headers for the first piece of body.
    Internal(web.StreamResponse, "_send_headers_immediately", "class attribute", (RELAYING,), value=bool),
    # What the WebSocket tunnel's stand-in (_ClientBytes) imitates, once given to set_parser.
    Internal(WebSocketReader, "feed_data", "method", (WEBSOCKETS,), ("data",)),
    Internal(WebSocketReader, "feed_eof", "method", (WEBSOCKETS,), ()),
    # The tests serve the app as `serve` does (tests/conftest.py's GatewayTestServer).
    Internal(test_utils.TestServer, "_make_runner", "coroutine", (TEST_CONFTEST,), ("kwargs",)),
)

OWN_NAMES = {("proxy/passthrough/http1.py", "_method"): "http1.Answer's own, not BaseRequest's"}
"""Private names that are aiohttp's too but, where they are used, name the gateway's own."""


@pytest.fixture(scope="module")
def idle_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A loop that never runs: aiohttp's server and handlers only keep it."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


async def _nothing(request: web.BaseRequest) -> web.StreamResponse:
    return web.Response()


@pytest.fixture(scope="module")
def samples(idle_loop: asyncio.AbstractEventLoop) -> dict[type, Any]:
    """One of each owner whose instance attributes are checked, made as aiohttp makes them."""
    server = web.Server(_nothing, loop=idle_loop)
    return {web.Server: server, RequestHandler: RequestHandler(server, loop=idle_loop)}


def _parameters(function: Any) -> tuple[str, ...]:
    return tuple(list(inspect.signature(function).parameters)[1:])


@pytest.mark.parametrize("internal", INTERNALS, ids=lambda internal: internal.label)
def test_aiohttp_still_has_it(internal: Internal, samples: dict[type, Any]) -> None:
    owner, name, label = internal.owner, internal.name, internal.label
    if internal.kind == "attribute":
        sample = samples[owner]
        assert hasattr(sample, name), f"aiohttp renamed or removed {label}"
        assert not callable(inspect.getattr_static(type(sample), name, None)), f"aiohttp made {label} a method"
        assert isinstance(getattr(sample, name), internal.value), f"aiohttp changed what {label} holds"
        return
    found = inspect.getattr_static(owner, name, None)
    assert found is not None, f"aiohttp renamed or removed {label}"
    if internal.kind == "property":
        assert isinstance(found, property), f"aiohttp made {label} something other than a property"
    elif internal.kind == "class attribute":
        assert isinstance(found, internal.value), f"aiohttp changed what {label} holds"
    else:
        assert callable(found), f"aiohttp made {label} something other than a method"
        is_coroutine = inspect.iscoroutinefunction(found)
        assert is_coroutine is (internal.kind == "coroutine"), f"aiohttp changed whether {label} is a coroutine"
        assert _parameters(found) == internal.parameters, f"aiohttp changed the signature of {label}"
    if internal.overridden is not None:
        ours = inspect.getattr_static(internal.overridden, name)
        assert _parameters(ours) == internal.parameters, f"{internal.overridden.__name__}.{name} no longer matches"


def test_the_handler_takes_the_arguments_the_gateway_gives_it() -> None:
    """_Server builds handlers as web.Server does: the manager first, then
    the loop and the app's knobs (proxy.app.handler_args) by keyword."""
    parameters = inspect.signature(RequestHandler.__init__).parameters
    assert list(parameters)[1] == "manager", "aiohttp changed RequestHandler.__init__'s first parameter"
    knobs = handler_args(cast(Settings, SimpleNamespace(client_idle_seconds=60.0)))
    for keyword in ("loop", *knobs):
        assert keyword in parameters and parameters[keyword].kind is inspect.Parameter.KEYWORD_ONLY, \
            f"aiohttp renamed or removed RequestHandler.__init__'s {keyword}"


def test_a_server_can_become_the_gateways(idle_loop: asyncio.AbstractEventLoop) -> None:
    """GatewayRunner turns the server aiohttp built into a _Server by
    changing its class: that takes two classes with the same layout (no
    __slots__ in web.Server, or the same ones)."""
    server = web.Server(_nothing, loop=idle_loop)
    server.__class__ = _Server
    assert isinstance(server(), _Handler)


def test_the_websocket_stand_in_is_fed_as_aiohttps_reader_is(idle_loop: asyncio.AbstractEventLoop) -> None:
    """After an upgrade, RequestHandler hands the client's bytes to the
    parser set_parser was given (feed_data, which answers (eof, tail)) and
    tells it of the connection's end (feed_eof): _ClientBytes relies on both."""

    class Tunnel:
        def __init__(self) -> None:
            self.sent: list[bytes] = []
            self.gone = False

        def up(self, data: bytes) -> None:
            self.sent.append(data)

        def client_gone(self) -> None:
            self.gone = True

    tunnel = Tunnel()
    handler = RequestHandler(web.Server(_nothing, loop=idle_loop), loop=idle_loop)
    handler.set_parser(websockets._ClientBytes(tunnel))  # type: ignore[arg-type]
    handler.data_received(b"frame")
    assert tunnel.sent == [b"frame"]
    handler.connection_lost(None)
    assert tunnel.gone


# -- the list is complete and true --------------------------------------------------------------


def _code_names(path: str) -> set[str]:
    """The names a file's code uses as attributes or defines (not its docstrings or comments)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):  # a class attribute
            names.add(node.id)
    return names


def test_each_name_is_used_where_the_list_says() -> None:
    stale = [f"{internal.label} in {path}" for internal in INTERNALS for path in internal.used_in
             if internal.name not in _code_names(path)]
    assert not stale, f"listed but no longer used there: {stale}"


def _private_names(owner: type, samples: dict[type, Any]) -> set[str]:
    """aiohttp's names on `owner` (its class's, and an instance's where one is made) that start with one underscore."""
    names = set(dir(owner)) | set(getattr(samples.get(owner), "__dict__", ()))
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _modules() -> Iterator[tuple[str, ModuleType, ast.Module]]:
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        module = importlib.import_module(relative.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
        yield relative, module, ast.parse(path.read_text())


def test_every_private_name_the_gateway_uses_is_listed(samples: dict[type, Any]) -> None:
    """A scan of proxy/: in a class of the gateway's that subclasses one of
    aiohttp's, what it overrides and the private names it uses of its base;
    anywhere else, any private name of aiohttp's classes used on an object
    (not self). Public but undocumented names used from outside
    (writing_paused, output_size) escape the scan: they are listed by hand."""
    listed = {internal.name for internal in INTERNALS}
    owners = {internal.owner for internal in INTERNALS} | {web.Request, web.Response, web.Application,
                                                           web.WebSocketResponse}
    aiohttp_private = set().union(*(_private_names(owner, samples) for owner in owners))
    found: set[tuple[str, str]] = set()  # (where and how, the name)
    for path, module, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                cls = getattr(module, node.name, None)
                bases = [base for base in getattr(cls, "__mro__", ())[1:] if base.__module__.startswith("aiohttp.")]
                if not bases:
                    continue
                base_names = set().union(*(set(dir(base)) | _private_names(base, samples) for base in bases))
                for item in node.body:  # what the class overrides: its methods and class attributes
                    names = ([item.name] if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                             else [target.id for target in item.targets if isinstance(target, ast.Name)]
                             if isinstance(item, ast.Assign) else [])
                    found |= {(f"{path}: {node.name} overrides {name}", name) for name in names
                              if name in base_names and name != "__init__"}  # __init__: the test above
                found |= {(f"{path}: {node.name} uses {item.attr}", item.attr) for item in ast.walk(node)
                          if isinstance(item, ast.Attribute) and item.attr in base_names
                          and item.attr.startswith("_") and not item.attr.startswith("__")}
            elif (isinstance(node, ast.Attribute) and node.attr in aiohttp_private
                  and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                  and (path, node.attr) not in OWN_NAMES):
                found.add((f"{path}: {ast.unparse(node)}", node.attr))
    unlisted = sorted(where for where, name in found if name not in listed)
    assert not unlisted, f"aiohttp names used but not listed in this test: {unlisted}"


def test_the_connection_modules_docstring_names_them_all() -> None:
    """proxy.server.connection's docstring lists what it relies on of the
    classes it subclasses, used there or on its connections elsewhere."""
    subclassed = {RequestHandler, web.Server, web.AppRunner}
    expected = {internal.name for internal in INTERNALS
                if internal.owner in subclassed or CONNECTION in internal.used_in}
    named = set(re.findall(r"`([A-Za-z_]\w*)`", connection.__doc__ or ""))
    assert named == expected, \
        f"only in the docstring: {sorted(named - expected)}; only in this test: {sorted(expected - named)}"
