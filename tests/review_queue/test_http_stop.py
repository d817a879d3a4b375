"""The bounded graceful stop of every role's HTTP servers (vigil.components._Server).

uvicorn waits without limit for open connections when it stops: one client stalled in the
middle of an upload kept a SIGTERMed role from ever exiting. These run a real server on a
free port and real sockets.
"""

from __future__ import annotations

import asyncio
import socket

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from vigil.components import http_server
from vigil.process import free_port


async def _echo(request: Request) -> Response:
    return Response(str(len(await request.body())))


def _app() -> Starlette:
    return Starlette(routes=[Route("/echo", _echo, methods=["POST"])])


async def _started(port: int) -> tuple[asyncio.Task[None], object]:
    server = http_server(_app(), "127.0.0.1", port)
    server.stop_grace_s = 0.5
    server.cancel_s = 0.5
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return task, server


def _head(length: int) -> bytes:
    return f"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(), 5)
    except ConnectionResetError:
        return b""


async def _stop_during_upload(
    length: int, sent: bytes
) -> tuple[asyncio.Task[None], int, asyncio.StreamReader, asyncio.StreamWriter]:
    """Start a server, send the head and ``sent`` of a ``length``-byte body, then ask it to stop."""
    port = free_port()
    task, server = await _started(port)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_head(length) + sent)
    await writer.drain()
    await asyncio.sleep(0.1)
    server.should_exit = True  # type: ignore[attr-defined]
    return task, port, reader, writer


def test_stalled_upload_is_aborted_without_a_response() -> None:
    """A request whose body never completes: the stop finishes, the client gets no answer (no 500)."""

    async def scenario() -> tuple[bytes, bool]:
        task, _port, reader, writer = await _stop_during_upload(100, b"ab")
        await asyncio.wait_for(task, 10)
        answer = await _read_all(reader)
        writer.close()
        return answer, task.done()

    answer, done = asyncio.run(scenario())
    assert done
    assert b"" == answer


def test_request_finishing_within_the_grace_is_answered() -> None:
    """A request in flight at the stop that completes within the grace gets its answer; new connections are refused."""

    async def scenario() -> tuple[bytes, bool]:
        task, port, reader, writer = await _stop_during_upload(4, b"ab")
        await asyncio.sleep(0.2)  # the listener is closed by now
        refused = False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
        except ConnectionRefusedError:
            refused = True
        writer.write(b"cd")
        await writer.drain()
        answer = await _read_all(reader)
        await asyncio.wait_for(task, 10)
        writer.close()
        return answer, refused

    answer, refused = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"\r\n\r\n4")
    assert refused
