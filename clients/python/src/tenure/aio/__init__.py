"""The asyncio API of the Tenure client, on ``grpc.aio``: the same shape as the blocking
API of :mod:`tenure`, with coroutines, async context managers and async iterators::

    import tenure.aio

    async with tenure.aio.Client(["127.0.0.1:7101"]) as c:
        async with c.session(ttl=10) as s:
            async with s.lock("/orders/batch") as lock:
                await c.objects.put("/orders/state", b"v", fence=lock)
        async with c.objects.watch("/cfg", include_values=True) as w:
            async for change in w:
                ...

Calls that make a held thing (``session.lock``, ``election.campaign``,
``lookup.publish``, the watches) return a :class:`Pending`: ``await`` it for the thing,
or use it in ``async with`` to end the thing on exit. Loss events are
:class:`asyncio.Event`; loss callbacks may be coroutine functions.
"""

from .client import Client, Lock, Pending, Session
from .elections import Election, Elections, Leadership, Observation
from .lookup import Lookup, LookupWatch, Publication
from .objects import Objects, ObjectWatch

__all__ = [
    "Client",
    "Session",
    "Lock",
    "Pending",
    "Objects",
    "ObjectWatch",
    "Elections",
    "Election",
    "Leadership",
    "Observation",
    "Lookup",
    "Publication",
    "LookupWatch",
]
