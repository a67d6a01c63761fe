"""The app's end of a FIFO gate (tests/python/e2e/test_compression.py's SSE test): the test
makes a FIFO (``os.mkfifo``), names it to the app, and writes one byte, ``x``, each time it lets
the app take its next step (having seen the previous one), so that the app's progress follows
the test's without a sleep: a step held back by the server stalls the test instead of passing.

It owns opening the FIFO and waiting for each step's byte, for WSGI (a generator) and ASGI (an
async generator, the read off the event loop); it must not decide what the steps send (the
app does).
"""

import asyncio
import contextlib

STEP = b"x"
"""The byte the test writes to let the next step go."""


@contextlib.contextmanager
def opened(gate):
    """The FIFO at ``gate`` opened for reading (its open waits for the test's end), or None
    when there is no gate (every step goes at once)."""
    if not gate:
        yield None
        return
    with open(gate, "rb", buffering=0) as fifo:
        yield fifo


def step(fifo):
    """Wait until the test lets the next step go."""
    assert fifo.read(1) == STEP


def gated(blocks, gate):
    """``blocks`` one by one (WSGI), each after the first once the test has let it go."""
    with opened(gate) as fifo:
        for index, block in enumerate(blocks):
            if fifo is not None and index > 0:
                step(fifo)
            yield block


async def gated_async(blocks, gate):
    """:func:`gated` for an ASGI app: each wait runs in the loop's default executor."""
    loop = asyncio.get_running_loop()
    with opened(gate) as fifo:
        for index, block in enumerate(blocks):
            if fifo is not None and index > 0:
                await loop.run_in_executor(None, step, fifo)
            yield block
