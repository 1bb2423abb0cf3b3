"""Tenure's exceptions.

Every error a client call raises is a :class:`TenureError`. The protocol's typed errors
(``message Error`` and ``message LookupError`` in ``proto/tenure.proto``) map one to one
to a subclass carrying the error's fields; gRPC status failures (a device that cannot be
reached, a missing or refused token, an overloaded device) map to their own subclasses.
``str(error)`` is a sentence for people: the server's own message when it sent one.

Which errors the client retries on its own (``error.retryable``): ``Unavailable`` (the
store is between managers), ``NotManager`` (followed to its hint), ``ConnectionFailed``
and ``DeadlineExceeded`` (another device is tried), ``Overloaded`` and ``NoLeader``. A
call raises one of those only once its deadline has passed; the message then says how
many attempts were made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # pragma: no cover
    import grpc

    from .types import FencingToken

__all__ = [
    "TenureError",
    # typed protocol errors
    "NotManager",
    "Unavailable",
    "SessionExpired",
    "Deadlock",
    "Timeout",
    "InvalidName",
    "TooLarge",
    "StaleToken",
    "UnknownStore",
    "WouldBlock",
    "NotHeld",
    "Rejected",
    "TooManyRequests",
    "WrongStore",
    "RequestIdReused",
    "InvalidRequest",
    "ObjectExists",
    "RevisionMismatch",
    "NoSuchObject",
    "NoSuchUpload",
    "UploadIncomplete",
    "NoSuchPart",
    "Compacted",
    "DataUnavailable",
    "PermissionDenied",
    # lookup errors
    "InvalidKey",
    "ValueTooLarge",
    "BadInterval",
    "NoLeader",
    "StaleVersion",
    "UnknownSubscription",
    # transport / gRPC status errors
    "ConnectionFailed",
    "DeadlineExceeded",
    "Unauthenticated",
    "Overloaded",
    "Unimplemented",
    "RpcError",
    "MalformedResponse",
    # client-side
    "SessionLost",
    "GrantUnconfirmed",
    "ClientClosed",
]


class TenureError(Exception):
    """Base class of every error the Tenure client raises.

    Attributes:
        message: the human-readable description (the server's, when it sent one).
        retryable: whether another attempt (at another device, or later) may succeed.
    """

    retryable: bool = False

    def __init__(self, message: str = "", **fields: Any) -> None:
        self.message = message or self._default_message(fields)
        for k, v in fields.items():
            setattr(self, k, v)
        self._fields = fields
        super().__init__(self.message)

    def _default_message(self, fields: dict) -> str:  # pragma: no cover - trivial
        if fields:
            inner = ", ".join(f"{k}={v!r}" for k, v in fields.items())
            return f"{type(self).__name__}({inner})"
        return type(self).__name__

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._fields.items())
        sep = ", " if inner else ""
        return f"{type(self).__name__}({self.message!r}{sep}{inner})"

    def _with_context(self, note: str) -> "TenureError":
        """Append ``note`` to the message (used when retries gave up)."""
        self.message = f"{self.message} ({note})"
        self.args = (self.message,)
        return self


# --------------------------------------------------------------------------------------
# Typed protocol errors (message Error).


class NotManager(TenureError):
    """The device does not manage the store and did not forward the request (a payload
    above one block, or no manager known there yet). ``hint_endpoint`` names the manager
    when known; the client follows it on its own."""

    retryable = True
    store: int
    hint_device: Optional[int]
    hint_endpoint: Optional[str]


class Unavailable(TenureError):
    """The store has no manager reachable right now (a failover takes a few seconds).
    Retried by the client with the same request id until the call's deadline."""

    retryable = True
    store: int


class SessionExpired(TenureError):
    """The session ended at its manager (its TTL passed without a keep-alive that reached
    it, or it was closed): its locks are released. Open a new session."""

    session: int


class Deadlock(TenureError):
    """The acquire would close a cycle in the store's waits-for graph (it was the
    youngest request in it)."""

    name: str


class Timeout(TenureError, TimeoutError):
    """A lock (or election) was not granted within the wait asked for."""

    name: str


class InvalidName(TenureError, ValueError):
    """The name is not a valid path (or not in the store expected: ``store`` is then the
    store it belongs to, else ``None``)."""

    name: str
    reason: str
    store: Optional[int]


class TooLarge(TenureError, ValueError):
    """A value is larger than the server accepts."""

    size: int
    limit: int


class StaleToken(TenureError):
    """A fenced request carried a fencing token that is not the lock's current one: the
    lock moved on (or is not held). ``presented`` and ``current`` are
    :class:`~tenure.FencingToken` (``current`` may be ``None``)."""

    presented: Optional["FencingToken"]
    current: Optional["FencingToken"]


class UnknownStore(TenureError):
    """The store does not exist in this cluster."""

    store: int


class WouldBlock(TenureError):
    """A no-wait acquire (or campaign) found the lock held."""

    name: str


class NotHeld(TenureError):
    """Release of a lock the session does not hold."""

    name: str


class Rejected(TenureError):
    """The request conflicts with what the session holds or asked for (or a parameter is
    out of range, e.g. a TTL or a lock-delay)."""

    reason: str


class TooManyRequests(TenureError):
    """More requests in flight on a session stream than the server allows."""

    retryable = True
    limit: int


class WrongStore(TenureError):
    """A request named another store than its session stream's."""

    stream_store: int
    request_store: int


class RequestIdReused(TenureError):
    """A request id was used for a different request in the session."""

    request_id: int


class InvalidRequest(TenureError, ValueError):
    """The server could not read the request."""

    reason: str


class ObjectExists(TenureError):
    """A create-only write (``if_absent``) found an active object under the key."""

    key: str
    revision: int


class RevisionMismatch(TenureError):
    """A compare-and-set (``if_revision``) found another revision; ``current`` is the
    active revision, ``None`` when the key has no active object."""

    key: str
    current: Optional[int]


class NoSuchObject(TenureError):
    """No active object under the key."""

    key: str


class NoSuchUpload(TenureError):
    """No multipart upload in progress with this id under the key."""

    key: str
    upload: str


class UploadIncomplete(TenureError):
    """A completion came before every block of the upload was written."""

    missing: int


class NoSuchPart(TenureError):
    """A multipart completion named a part that was not uploaded."""

    part: int


class Compacted(TenureError):
    """A watch asked to resume after ``asked`` but the store keeps changes only after
    ``compacted``: re-read the prefix (``objects.list``), then watch from the listing's
    revision."""

    asked: int
    compacted: int


class DataUnavailable(TenureError):
    """No complete chunk could serve the object's data in time (retry later)."""

    retryable = True
    key: str


class PermissionDenied(TenureError):
    """The token may not make this call (gRPC PERMISSION_DENIED, or the typed error on a
    stream). ``token``, ``permission`` and ``path`` are set when the server named them."""

    token: Optional[str]
    permission: Optional[str]
    path: Optional[str]


# --------------------------------------------------------------------------------------
# Lookup errors (message LookupError).


class InvalidKey(TenureError, ValueError):
    """A lookup key or prefix is not a valid path."""

    key: str
    reason: str


class ValueTooLarge(TenureError, ValueError):
    """A lookup value is larger than the service accepts."""

    size: int
    limit: int


class BadInterval(TenureError, ValueError):
    """A refresh interval is out of the service's range (seconds)."""

    got: float
    min: float
    max: float


class NoLeader(TenureError):
    """No lookup leader answered (a lookup outage): retried until the deadline."""

    retryable = True


class StaleVersion(TenureError):
    """The entry already has a newer version (a replay, or a provider whose clock is
    ahead)."""


class UnknownSubscription(TenureError):
    """The lookup watch's subscription is not known to the node."""

    sub: int


# --------------------------------------------------------------------------------------
# gRPC status errors and client-side errors.


class ConnectionFailed(TenureError):
    """No connection to a device (gRPC UNAVAILABLE: refused, reset, shutting down, a TLS
    handshake that failed). The client tries the other endpoints."""

    retryable = True
    endpoint: Optional[str]


class DeadlineExceeded(TenureError, TimeoutError):
    """No answer in time (an attempt cut by the client's per-attempt timeout, or the
    call's deadline passed)."""

    retryable = True
    endpoint: Optional[str]


class Unauthenticated(TenureError):
    """The cluster requires a token and the call had none it knows (give ``token=`` or
    set ``TENURE_TOKEN``)."""


class Overloaded(TenureError):
    """The device has as many requests in flight as it takes (RESOURCE_EXHAUSTED with
    ``tenure-overloaded``): retried on the same device after a pause."""

    retryable = True


class Unimplemented(TenureError):
    """The server does not serve this operation (gRPC UNIMPLEMENTED)."""


class RpcError(TenureError):
    """Another gRPC failure: ``code`` is the :class:`grpc.StatusCode`, ``details`` the
    status message."""

    code: Any
    details: str


class MalformedResponse(TenureError):
    """The server answered with an empty ``oneof``."""


class SessionLost(TenureError):
    """The session may have ended: a keep-alive answered ``SessionExpired``, or no
    keep-alive was answered alive within the TTL (minus the clock drift bound) of its
    sending. Its locks and leaderships must be taken as lost. Open a new session."""


class GrantUnconfirmed(TenureError):
    """A lock (or leadership) was granted so close to the session's conservative deadline
    that no keep-alive could confirm the session in time: it was released, not taken."""

    name: str


class ClientClosed(TenureError):
    """The client (or session, or watch) was closed while the call ran."""


# --------------------------------------------------------------------------------------
# Conversions.


def _token(t: Any) -> Optional["FencingToken"]:
    from .types import FencingToken

    if t is None:
        return None
    return FencingToken(t.epoch, t.seq)


def _naming(msg: str, name: str, default: str) -> str:
    """The server's message naming ``name`` once: as sent when it names it already
    (servers since the lock's name went into WouldBlock/Timeout/Deadlock/NotHeld
    messages), else with the name appended; ``default`` when the server sent none."""
    if not msg:
        return default
    if not name or name in msg:
        return msg
    return f"{msg}: {name}"


def from_proto(err: Any) -> TenureError:
    """The exception for a ``tenure.v1.Error`` message."""
    kind = err.WhichOneof("kind")
    msg = err.message
    if kind is None:
        return RpcError(msg or "the server answered an error of a kind this client does "
                        "not know (upgrade the client?)", code=None, details=msg)
    v = getattr(err, kind)
    if kind == "not_manager":
        hint = v.hint_endpoint or None
        text = msg or (
            f"the device does not manage store {v.store}"
            + (f"; its manager is at {hint}" if hint else "")
        )
        return NotManager(
            text,
            store=v.store,
            hint_device=v.hint_device if v.HasField("hint_device") else None,
            hint_endpoint=hint,
        )
    if kind == "unavailable":
        return Unavailable(msg or f"store {v.store} is unavailable", store=v.store)
    if kind == "session_expired":
        return SessionExpired(msg or f"session {v.session} expired", session=v.session)
    if kind == "deadlock":
        return Deadlock(_naming(msg, v.name, f"deadlock on {v.name}"), name=v.name)
    if kind == "timeout":
        return Timeout(_naming(msg, v.name, f"timed out waiting for {v.name}"), name=v.name)
    if kind == "invalid_name":
        return InvalidName(msg or f"invalid name {v.name!r}: {v.reason}", name=v.name,
                           reason=v.reason, store=v.store if v.HasField("store") else None)
    if kind == "too_large":
        return TooLarge(msg or f"too large: {v.size} bytes, limit {v.limit}", size=v.size,
                        limit=v.limit)
    if kind == "stale_token":
        presented = _token(v.presented) if v.HasField("presented") else None
        current = _token(v.current) if v.HasField("current") else None
        return StaleToken(msg or f"stale fencing token {presented}", presented=presented,
                          current=current)
    if kind == "unknown_store":
        return UnknownStore(msg or f"unknown store {v.store}", store=v.store)
    if kind == "would_block":
        return WouldBlock(_naming(msg, v.name, f"lock {v.name} is held"), name=v.name)
    if kind == "not_held":
        return NotHeld(_naming(msg, v.name, f"lock {v.name} is not held"), name=v.name)
    if kind == "rejected":
        return Rejected(msg or f"rejected: {v.reason}", reason=v.reason)
    if kind == "too_many_requests":
        return TooManyRequests(msg or f"too many requests in flight (limit {v.limit})",
                               limit=v.limit)
    if kind == "wrong_store":
        return WrongStore(msg or "request for another store than the stream's",
                          stream_store=v.stream_store, request_store=v.request_store)
    if kind == "request_id_reused":
        return RequestIdReused(msg or f"request id {v.request_id} reused",
                               request_id=v.request_id)
    if kind == "invalid_request":
        return InvalidRequest(msg or f"invalid request: {v.reason}", reason=v.reason)
    if kind == "object_exists":
        return ObjectExists(msg or f"object {v.key} exists (revision {v.revision})",
                            key=v.key, revision=v.revision)
    if kind == "revision_mismatch":
        current = v.current if v.HasField("current") else None
        if not msg or v.key not in msg:
            state = f"is at revision {current}" if current is not None else "does not exist"
            msg = f"object {v.key} {state}, not the revision expected"
        return RevisionMismatch(msg, key=v.key, current=current)
    if kind == "no_such_object":
        return NoSuchObject(_naming(msg, v.key, f"no object {v.key}"), key=v.key)
    if kind == "no_such_upload":
        return NoSuchUpload(msg or f"no upload {v.upload} under {v.key}", key=v.key,
                            upload=v.upload)
    if kind == "upload_incomplete":
        return UploadIncomplete(msg or f"upload incomplete: {v.missing} blocks missing",
                                missing=v.missing)
    if kind == "no_such_part":
        return NoSuchPart(msg or f"no part {v.part} was uploaded", part=v.part)
    if kind == "compacted":
        return Compacted(
            msg or f"revision {v.asked} is compacted (history starts after {v.compacted}): "
            "re-read",
            asked=v.asked, compacted=v.compacted)
    if kind == "data_unavailable":
        return DataUnavailable(msg or f"the data of object {v.key} is unavailable",
                               key=v.key)
    if kind == "overloaded":
        return Overloaded(msg or f"the device is overloaded ({v.limit} requests in flight): "
                          "retry after a pause")
    if kind == "permission_denied":
        return PermissionDenied(
            msg or f"token {v.token} lacks {v.permission} on {v.path}",
            token=v.token or None, permission=v.permission or None, path=v.path or None)
    return RpcError(msg or f"error {kind}", code=None, details=msg)  # pragma: no cover


def from_lookup_proto(err: Any) -> TenureError:
    """The exception for a ``tenure.v1.LookupError`` message."""
    kind = err.WhichOneof("kind")
    msg = err.message
    if kind is None:
        return RpcError(msg or "unknown lookup error", code=None, details=msg)
    v = getattr(err, kind)
    if kind == "invalid_key":
        return InvalidKey(msg or f"invalid key {v.key!r}: {v.reason}", key=v.key,
                          reason=v.reason)
    if kind == "too_large":
        return ValueTooLarge(msg or f"value of {v.size} bytes is larger than {v.limit}",
                             size=v.size, limit=v.limit)
    if kind == "bad_interval":
        return BadInterval(msg or "refresh interval out of range", got=v.got_ms / 1000,
                           min=v.min_ms / 1000, max=v.max_ms / 1000)
    if kind == "no_leader":
        return NoLeader(msg or "no lookup leader answered (a lookup outage)")
    if kind == "stale_version":
        return StaleVersion(msg or "the entry has a newer version")
    if kind == "unknown_subscription":
        return UnknownSubscription(msg or f"unknown subscription {v.sub}", sub=v.sub)
    if kind == "invalid_request":
        return InvalidRequest(msg or f"invalid request: {v.reason}", reason=v.reason)
    return RpcError(msg or f"lookup error {kind}", code=None, details=msg)  # pragma: no cover


OVERLOADED_KEY = "tenure-overloaded"

_CONNECT_HINT = "is the cluster running? (`tenure cluster status`, or check the endpoints)"


def from_rpc_error(e: "grpc.RpcError", endpoint: Optional[str] = None,
                   *, tls: bool = True) -> TenureError:
    """The exception for a gRPC failure (a ``grpc.RpcError`` or ``grpc.aio.AioRpcError``)
    of a call to ``endpoint``."""
    import grpc

    code = e.code() if hasattr(e, "code") else None
    details = (e.details() if hasattr(e, "details") else str(e)) or ""
    at = f" at {endpoint}" if endpoint else ""
    if code == grpc.StatusCode.UNAVAILABLE:
        low = details.lower()
        if "requires tls" in low or "goaway" in low and "tls" in low:
            return _permanent(ConnectionFailed(
                f"the device{at} requires TLS and this client speaks plaintext: give the "
                "cluster's CA certificate (tls_ca=..., a local cluster's is tls/ca.pem in "
                "its data directory)", endpoint=endpoint))
        if "handshake" in low or "certificate" in low or "ssl" in low:
            return _permanent(ConnectionFailed(
                f"TLS handshake with the device{at} failed: {_short(details)} (is tls_ca "
                "the cluster's CA?)", endpoint=endpoint))
        if "connect" in low or "refused" in low or "failed to connect" in low:
            return ConnectionFailed(
                f"cannot connect to the device{at} ({_short(details)}); {_CONNECT_HINT}",
                endpoint=endpoint)
        return ConnectionFailed(f"the device{at} is unavailable: {_short(details)}",
                                endpoint=endpoint)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        text = f"no answer in time from the device{at}"
        if not tls:
            text += " (if the cluster uses TLS, give tls_ca=...)"
        return DeadlineExceeded(text, endpoint=endpoint)
    if code == grpc.StatusCode.CANCELLED:
        return DeadlineExceeded(f"the call{at} was cancelled: {_short(details)}",
                                endpoint=endpoint)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Unauthenticated(f"not authenticated: {details}")
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return PermissionDenied(f"permission denied: {details}", token=None,
                                permission=None, path=None)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        md = {}
        try:
            md = dict(e.trailing_metadata() or ())
        except Exception:  # pragma: no cover - metadata access is best effort
            pass
        if OVERLOADED_KEY in md or "overloaded" in details.lower():
            return Overloaded(details or f"the device{at} is overloaded")
        return RpcError(f"request refused (RESOURCE_EXHAUSTED){at}: {details}", code=code,
                        details=details)
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return Unimplemented(
            f"not implemented by the server{at}" + (f": {details}" if details else ""))
    name = code.name if code is not None else "UNKNOWN"
    err = RpcError(f"request failed ({name}){at}: {details}", code=code, details=details)
    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.ABORTED):
        err.retryable = True
    return err


def _permanent(e: TenureError) -> TenureError:
    """A failure no other attempt can mend (TLS refused either way): not retried."""
    e.retryable = False
    return e


def _short(details: str) -> str:
    """A gRPC failure's details without the transport's dump: the last cause."""
    d = details.strip()
    if "last error:" in d:
        d = d.split("last error:", 1)[1].strip()
    if len(d) > 200:
        d = d[:200] + "..."
    return d
