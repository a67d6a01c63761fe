"""A FastAPI app whose lifespan writes one line per event to the file named by
``LIFESPAN_FILE`` (``<pid> startup``, ``<pid> shutdown``), so a test can tell which workers ran
their shutdown. With ``LIFESPAN_STALL`` set, the shutdown writes ``<pid> shutdown-begin`` and
then waits for ever (``<pid> shutdown-cancelled`` if the server cancels it), for the tests of
what ends a shutdown that does not end by itself. Its own ``logging`` records: ``/log`` logs a
warning on the ``lifespan_lines`` logger. ``/hang`` writes ``<pid> request-begin`` and waits for
ever (``<pid> request-cancelled`` once the server cancels it)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI


def record(event: str) -> None:
    with open(os.environ["LIFESPAN_FILE"], "a") as file:
        file.write(f"{os.getpid()} {event}\n")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    record("startup")
    yield
    if os.environ.get("LIFESPAN_STALL"):
        record("shutdown-begin")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            record("shutdown-cancelled")
            raise
    record("shutdown")


app = FastAPI(lifespan=lifespan)


@app.get("/log")
async def log_a_line() -> dict[str, int]:
    logging.getLogger("lifespan_lines").warning("a record from the app, pid %d", os.getpid())
    return {"pid": os.getpid()}


@app.get("/hang")
async def hang() -> None:
    record("request-begin")
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        record("request-cancelled")
        raise
