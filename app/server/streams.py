"""Reads and writes with deadlines, at the cost of a timer each.

``asyncio.wait_for`` wraps its awaitable in a new task; on the hot path (every request head,
every block of lines, every answer) that task was a good part of the loop's CPU per request.
``asyncio.timeout`` only arms a timer, and a write that the kernel took whole needs no wait.
"""

from __future__ import annotations

import asyncio

from app.server.settings import READ_BLOCK_BYTES


async def read_block(reader: asyncio.StreamReader, timeout_s: float | None) -> bytes:
    """The next bytes (at most ``READ_BLOCK_BYTES``; ``b""`` at end of stream).

    Raises TimeoutError after ``timeout_s`` (None: wait for ever)."""
    async with asyncio.timeout(timeout_s):
        return await reader.read(READ_BLOCK_BYTES)


async def drain(writer: asyncio.StreamWriter, timeout_s: float) -> None:
    """Wait until the client has taken what was written, at most ``timeout_s``."""
    if writer.transport.get_write_buffer_size() == 0:
        return  # the socket took it all: nothing to wait for
    async with asyncio.timeout(timeout_s):
        await writer.drain()
