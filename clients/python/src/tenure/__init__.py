"""The Python client of Tenure, a fault-tolerant coordination service: distributed locks
with fencing tokens, sessions (leases), leader elections, a versioned object store with
watches, and a soft-state lookup service.

Blocking API::

    import tenure

    with tenure.Client(["127.0.0.1:7101", "127.0.0.1:7102"], tls_ca="ca.pem") as c:
        with c.session(ttl=10) as s:
            with s.lock("/orders/batch") as lock:
                c.objects.put("/orders/state", b"v", fence=lock)

asyncio API: :mod:`tenure.aio` (the same shape, on ``grpc.aio``).
"""

from ._core import Options
from .client import Client, Lock, Session
from .elections import Election, Elections, Leadership, Observation
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all
from .lookup import Lookup, LookupWatch, Publication
from .objects import Objects, ObjectWatch
from .types import (
    DeviceStatus,
    FencingToken,
    Holder,
    Leader,
    LeaderChange,
    Listing,
    LockState,
    LookupChange,
    LookupEntry,
    ManagerStatus,
    Object,
    ObjectChange,
    ObjectInfo,
    ObjectWritten,
    Resolved,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Session",
    "Lock",
    "Options",
    "Objects",
    "ObjectWatch",
    "Elections",
    "Election",
    "Leadership",
    "Observation",
    "Lookup",
    "Publication",
    "LookupWatch",
    "FencingToken",
    "Resolved",
    "DeviceStatus",
    "ManagerStatus",
    "Holder",
    "LockState",
    "ObjectInfo",
    "Object",
    "ObjectWritten",
    "Listing",
    "ObjectChange",
    "Leader",
    "LeaderChange",
    "LookupEntry",
    "LookupChange",
    "__version__",
] + list(_errors_all)
