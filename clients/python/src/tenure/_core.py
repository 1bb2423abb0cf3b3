"""What the sync and asyncio clients share and that does no I/O: options, credentials,
endpoint choice, the retry plan of one call, the name → store cache, and unpacking the
``oneof result`` of an answer."""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import errors
from .errors import (
    ConnectionFailed,
    DeadlineExceeded,
    NoLeader,
    NotManager,
    Overloaded,
    TenureError,
)

#: Largest value sent in one ``Objects.Put`` message (the server's ``max_value_size``
#: default); larger contents are streamed with ``Objects.Upload``.
PUT_LIMIT = 1 << 20
#: Size of an upload's data messages (one block).
UPLOAD_SLICE = 1 << 20
#: Redirect hints followed in a row before the endpoints are tried in turn instead (old
#: managers' hints can name each other).
MAX_REDIRECTS = 3
#: Typed ``Unavailable`` answers taken in a row from one device before another is tried.
MAX_UNAVAILABLE = 3


@dataclass
class Options:
    """Timing and retry settings of a client (every duration in seconds).

    Attributes:
        deadline: total time one call may take across its retries (redirects, failovers,
            devices that do not answer). A call still failing then raises its last error.
        attempt_timeout: one attempt at one device; a device that does not answer within
            it is passed over for ``pass_over`` seconds.
        backoff_min, backoff_max: the jittered exponential backoff between attempts.
        session_ttl: the TTL sessions ask for unless ``client.session(ttl=...)`` says.
        clock_drift: δ_c, the bound on clock differences the cluster is configured with
            (``[timing] clock_drift_ms``, 50 ms by default): a session is taken as safe
            until the send time of its last keep-alive answered alive + TTL − δ_c.
        wait_poll: longest single RPC of an acquire or campaign that waits without a
            ``timeout``; the wait goes on with a retry of the same request (the same
            place in the queue). A wait with a ``timeout`` is one RPC carrying it (sent
            again, with its request id, only after a failure: a failover, a device gone).
        pass_over: how long an endpoint that did not answer is tried last.
        client_name: reported to the servers (their logs).
    """

    deadline: float = 30.0
    attempt_timeout: float = 5.0
    backoff_min: float = 0.05
    backoff_max: float = 1.0
    session_ttl: float = 10.0
    clock_drift: float = 0.05
    wait_poll: float = 15.0
    pass_over: float = 5.0
    client_name: str = field(default_factory=lambda: f"tenure-python/{os.getpid()}")


def normalize_endpoint(ep: str) -> str:
    """``host:port`` from ``host:port``, ``http://host:port`` or ``https://host:port``."""
    ep = ep.strip()
    for prefix in ("http://", "https://", "grpc://", "grpcs://"):
        if ep.startswith(prefix):
            ep = ep[len(prefix):]
    return ep.rstrip("/")


def parse_endpoints(endpoints: Union[None, str, Iterable[str]]) -> List[str]:
    """The endpoint list of a client: a list, a comma-separated string, or ``None`` for
    ``TENURE_ENDPOINTS``."""
    if endpoints is None:
        endpoints = os.environ.get("TENURE_ENDPOINTS", "")
    if isinstance(endpoints, str):
        endpoints = endpoints.split(",")
    out: List[str] = []
    for e in endpoints:
        e = normalize_endpoint(str(e))
        if e and e not in out:
            out.append(e)
    if not out:
        raise ValueError("no endpoints given (pass a list of host:port, or set TENURE_ENDPOINTS)")
    return out


def _read_pem(value: Union[None, str, bytes, os.PathLike], what: str) -> Optional[bytes]:
    if value is None:
        return None
    if isinstance(value, bytes):
        if b"-----BEGIN" in value:
            return value
        value = value.decode()
    text = os.fspath(value)
    if "-----BEGIN" in text:
        return text.encode()
    path = Path(text).expanduser()
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read the {what} {path}: {e.strerror or e}") from None
    if b"-----BEGIN" not in data:
        raise ValueError(f"the {what} {path} holds no PEM data (-----BEGIN ...)")
    return data


@dataclass(frozen=True)
class Credentials:
    """TLS material and the bearer token a client presents."""

    tls: bool
    root_certificates: Optional[bytes]
    private_key: Optional[bytes]
    certificate_chain: Optional[bytes]
    server_name: Optional[str]
    token: Optional[str]

    @classmethod
    def make(cls, *, endpoints: Sequence[str], raw_endpoints: Any, tls_ca: Any, tls_cert: Any,
             tls_key: Any, tls_server_name: Optional[str], token: Optional[str]) -> "Credentials":
        if tls_ca is None:
            env = os.environ.get("TENURE_CA")
            tls_ca = env or None
        if token is None:
            token = os.environ.get("TENURE_TOKEN") or None
        if token is not None:
            token = token.strip()
            if not token or any(c.isspace() for c in token) or not token.isascii() \
                    or not token.isprintable():
                raise ValueError("the token is not valid: tokens are visible ASCII characters "
                                 "without spaces")
        https = isinstance(raw_endpoints, (list, tuple, str)) and any(
            str(e).strip().startswith(("https://", "grpcs://"))
            for e in (raw_endpoints.split(",") if isinstance(raw_endpoints, str) else raw_endpoints))
        root = _read_pem(tls_ca, "CA certificate")
        cert = _read_pem(tls_cert, "client certificate")
        key = _read_pem(tls_key, "client key")
        if (cert is None) != (key is None):
            raise ValueError("tls_cert and tls_key go together")
        return cls(tls=root is not None or https or cert is not None, root_certificates=root,
                   private_key=key, certificate_chain=cert, server_name=tls_server_name,
                   token=token)

    def metadata(self) -> Tuple[Tuple[str, str], ...]:
        if self.token:
            return (("authorization", f"Bearer {self.token}"),)
        return ()


#: gRPC channel options every connection uses.
CHANNEL_OPTIONS: List[Tuple[str, Any]] = [
    ("grpc.max_receive_message_length", 80 << 20),
    ("grpc.max_send_message_length", 80 << 20),
    # A device that restarts is found again soon (the default backoff grows to 2 min).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.enable_retries", 0),
]


def channel_options(creds: Credentials) -> List[Tuple[str, Any]]:
    opts = list(CHANNEL_OPTIONS)
    if creds.server_name:
        opts.append(("grpc.ssl_target_name_override", creds.server_name))
    return opts


class Router:
    """Which endpoint to try: the one that answered last (a client keeps to one device
    and moves only when it stops answering), then the others; endpoints that recently did
    not answer go last. Thread-safe."""

    def __init__(self, endpoints: Sequence[str], pass_over: float) -> None:
        self.endpoints = list(endpoints)
        self._pass_over = pass_over
        self._preferred: Optional[str] = random.choice(self.endpoints)
        self._slow: Dict[str, float] = {}
        self._lock = threading.Lock()

    def candidates(self) -> List[str]:
        """Every endpoint, best first."""
        with self._lock:
            now = time.monotonic()
            self._slow = {e: t for e, t in self._slow.items() if t > now}
            out: List[str] = []
            if self._preferred is not None:
                out.append(self._preferred)
            n = len(self.endpoints)
            start = self.endpoints.index(self._preferred) if self._preferred in self.endpoints else 0
            for i in range(n):
                e = self.endpoints[(start + i) % n]
                if e not in out:
                    out.append(e)
            out.sort(key=lambda e: e in self._slow)
            return out

    def first(self) -> str:
        return self.candidates()[0]

    def succeeded(self, ep: str) -> None:
        with self._lock:
            self._slow.pop(ep, None)
            if ep in self.endpoints:
                self._preferred = ep

    def failed(self, ep: str) -> None:
        """``ep`` did not answer: try it last for a while."""
        with self._lock:
            self._slow[ep] = time.monotonic() + self._pass_over
            if self._preferred == ep:
                self._preferred = None


def backoff_delay(opts: Options, failures: int) -> float:
    """Jittered exponential backoff after ``failures`` failures in a row (≥ 1)."""
    top = min(opts.backoff_max, opts.backoff_min * (2 ** min(max(failures - 1, 0), 16)))
    return random.uniform(top / 2, top)


class Plan:
    """The retry plan of one call: which endpoint the next attempt goes to, how long it
    may take, and how long to sleep before it. ``failed`` raises the error when it is not
    retryable or the call's deadline would pass."""

    def __init__(self, router: Router, opts: Options, *, deadline: Optional[float] = None,
                 hint: Optional[str] = None, attempt_timeout: Optional[float] = None) -> None:
        self.router = router
        self.opts = opts
        self.started = time.monotonic()
        self.deadline_at = self.started + (opts.deadline if deadline is None else deadline)
        self.attempt_timeout = attempt_timeout or opts.attempt_timeout
        self.attempts = 0
        self._failures = 0
        self._redirects = 0
        self._unavailable = 0
        self._seen: set = set()
        self.target = normalize_endpoint(hint) if hint else router.first()

    def timeout(self) -> float:
        """The timeout of the next attempt."""
        left = self.deadline_at - time.monotonic()
        return max(0.05, min(self.attempt_timeout, left))

    def remaining(self) -> float:
        return self.deadline_at - time.monotonic()

    def succeeded(self) -> None:
        self.router.succeeded(self.target)

    def _rotate(self) -> bool:
        """Move to another endpoint: one not tried yet by this call if any (returns True),
        else the next one in turn (returns False: every endpoint failed once)."""
        self._seen.add(self.target)
        cands = self.router.candidates()
        for e in cands:
            if e not in self._seen:
                self.target = e
                return True
        others = [e for e in cands if e != self.target] or cands
        self.target = others[0]
        return False

    def failed(self, err: TenureError, *, cut: bool = False) -> float:
        """Record a failed attempt; return the pause before the next one (at
        ``self.target``), or raise."""
        self.attempts += 1
        if not err.retryable:
            raise err
        delay = 0.0
        if cut:
            # A long wait cut by its own bound: the device answered nothing wrong; the same
            # request again at once continues the wait.
            pass
        elif isinstance(err, NotManager):
            hint = normalize_endpoint(err.hint_endpoint) if err.hint_endpoint else None
            if hint and hint != self.target and self._redirects < MAX_REDIRECTS:
                self._redirects += 1
                self._seen.add(self.target)
                self.target = hint
            else:
                self._redirects = 0
                self._failures += 1
                self._rotate()
                delay = backoff_delay(self.opts, self._failures)
        elif isinstance(err, (ConnectionFailed, DeadlineExceeded, errors.RpcError)):
            # The device is down or did not answer: another one, at once if this call has
            # not tried it yet.
            self.router.failed(self.target)
            self._failures += 1
            self._redirects = 0
            if not self._rotate():
                delay = backoff_delay(self.opts, self._failures)
        elif isinstance(err, Overloaded):
            self._failures += 1
            delay = backoff_delay(self.opts, self._failures)
        elif isinstance(err, NoLeader):
            self._rotate()
            delay = self.opts.backoff_min
        else:
            # Unavailable (between managers), DataUnavailable, TooManyRequests: the same
            # device a few times (it forwards to whichever manager comes), then another.
            self._failures += 1
            self._unavailable += 1
            if self._unavailable >= MAX_UNAVAILABLE:
                self._unavailable = 0
                self._rotate()
            delay = backoff_delay(self.opts, self._failures)
        now = time.monotonic()
        if now + delay >= self.deadline_at:
            raise err._with_context(
                f"gave up after {self.attempts} attempt{'s' if self.attempts != 1 else ''} "
                f"in {now - self.started:.1f} s")
        return delay


def first_segment(name: str) -> Optional[str]:
    """The first path segment of a name (the part that picks its store), or ``None``
    when the name is not a path (the server then answers ``InvalidName``)."""
    if not name.startswith("/"):
        return None
    seg = name[1:].split("/", 1)[0]
    return seg or None


class StoreCache:
    """Store of each first path segment (the store of a name is a hash of it), learnt
    from ``Resolve`` answers; never changes within a cluster."""

    def __init__(self) -> None:
        self._map: Dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> Optional[int]:
        seg = first_segment(name)
        if seg is None:
            return None
        with self._lock:
            return self._map.get(seg)

    def put(self, name: str, store: int) -> None:
        seg = first_segment(name)
        if seg is not None:
            with self._lock:
                self._map[seg] = store


def unwrap(resp: Any, field_name: str = "result") -> Any:
    """The ``ok`` of an answer's ``oneof``, or raise its typed error."""
    which = resp.WhichOneof(field_name)
    if which == "ok":
        return resp.ok
    if which == "error":
        e = resp.error
        if e.DESCRIPTOR.name == "LookupError":
            raise errors.from_lookup_proto(e)
        raise errors.from_proto(e)
    raise errors.MalformedResponse("malformed answer from the server (an empty result)")


def validate_path(name: str, what: str = "name") -> str:
    """Cheap client-side check of a name (the server checks again)."""
    if not isinstance(name, str):
        raise TypeError(f"the {what} must be a str, not {type(name).__name__}")
    return name


def to_bytes(value: Union[bytes, bytearray, memoryview, str]) -> bytes:
    """Values are bytes; a str is encoded as UTF-8."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"expected bytes or str, not {type(value).__name__}")


def now_micros() -> int:
    return time.time_ns() // 1000


class Stamper:
    """A lookup provider's versions: strictly increasing stamps (µs of the wall clock, at
    least one more than the last) under one random provider id."""

    def __init__(self) -> None:
        self.provider = random.getrandbits(63) | 1
        self.last = 0
        self._lock = threading.Lock()

    def next(self) -> Tuple[int, int]:
        with self._lock:
            self.last = max(now_micros(), self.last + 1)
            return self.last, self.provider
