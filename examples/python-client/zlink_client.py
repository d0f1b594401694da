"""A small ZLink client in Python (pyzmq + msgpack), written from docs/CLIENT-PROTOCOL.md.

One DEALER connection to a node's client endpoint = one session. A background I/O thread owns
the socket: it pings, answers nothing but reads everything (Pong, FlowCredit, Reply, ErrorReply,
Push, Disconnect, and 139 batches of replies and pushes), and sends requests and one-way records
only within the credit the node granted. The application thread talks to it through queues.

    c = Client("tcp://127.0.0.1:7000")
    c.wait_ready()
    ref = c.create("echo", "e1")                     # framework operation (CREATE)
    print(c.call(ref, 10, b"hi"))                    # CALL the echo actor (Echo = key 10)
    key, payload = c.recv_push(timeout=5)            # a push (148), or None
    c.close()
"""

import collections
import queue
import struct
import threading
import time

import msgpack
import zmq

VERSION = 1
HEADER = struct.Struct(">BBBBQ")  # version, command, flags, reserved, correlation
HAS_PAYLOAD, REPLY = 0x01, 0x02

PING, PONG, FLOW_CREDIT, BATCH = 136, 137, 138, 139
REQUEST, REPLY_CMD, ERROR_REPLY, ONE_WAY, PUSH, DISCONNECT = 144, 145, 146, 147, 148, 149

ERROR_KINDS = {1: "Unavailable", 2: "InvalidOperation", 3: "NotFound",
               4: "DeadlineExceeded", 5: "Internal", 6: "Cancelled"}
CLOSE_REASONS = {1: "Shutdown", 2: "Protocol", 3: "Timeout", 4: "Replaced",
                 5: "Closed", 6: "RelocationSealTimeout", 7: "Refused",
                 8: "SlowConsumer"}

# Framework operations (144 Request keys; CALL also as a 147 one-way send).
CREATE, GET_OR_CREATE, GET, CALL, DESTROY, NODE_INFO = range(0xFFFF0001, 0xFFFF0007)
AUTHENTICATE = 0xFFFF000A  # present the node's operator credential (CLIENT-PROTOCOL 7.1)


class ZLinkError(Exception):
    """A 146 ErrorReply: `kind` is the ErrorKind number, `name` its name."""

    def __init__(self, kind, detail):
        self.kind, self.name, self.detail = kind, ERROR_KINDS.get(kind, str(kind)), detail
        super().__init__(f"{self.name}: {detail}")


class SessionClosed(Exception):
    """The node ended the session with a 149 Disconnect (`reason` number)."""

    def __init__(self, reason):
        self.reason = reason
        super().__init__(f"session closed: {CLOSE_REASONS.get(reason, reason)}")


def pack(value):
    return msgpack.packb(value, use_bin_type=True)


def unpack(data):
    return msgpack.unpackb(data, raw=False)


def envelope(command, flags, correlation, fields):
    """Fixed 12-byte header + the record's fields: a msgpack array (compact form), or a map
    of the field names (named form)."""
    return HEADER.pack(VERSION, command, flags, 0, correlation) + pack(fields)


def parse_envelope(env):
    version, command, flags, reserved, corr = HEADER.unpack_from(env)
    if version != VERSION or reserved != 0:
        raise ValueError(f"bad header {env[:12].hex()}")
    return command, flags, corr, unpack(env[12:])


def parse_batch(frame):
    """A 139 frame: u32 count, then per record u8 parts, u32 len + envelope, [u32 len + payload]."""
    (count,) = struct.unpack_from(">I", frame, 12)
    at, records = 16, []
    for _ in range(count):
        parts, length = struct.unpack_from(">BI", frame, at)
        at += 5
        env, payload = frame[at:at + length], None
        at += length
        if parts == 2:
            (length,) = struct.unpack_from(">I", frame, at)
            payload = frame[at + 4:at + 4 + length]
            at += 4 + length
        elif parts != 1:
            raise ValueError("batch: bad part count")
        if len(env) < 12 or (parts == 2 and len(payload) != length):
            raise ValueError("batch: record runs past the frame")
        records.append((env, payload))
    if at != len(frame):
        raise ValueError("batch: trailing bytes")
    return records


class _Call:
    def __init__(self):
        self.done = threading.Event()
        self.result = self.error = None


class Client:
    def __init__(self, endpoint, ping_interval=0.5, context=None, first_one_way=None):
        """`first_one_way` (key, payload), for tests: a 147 sent first, before any credit,
        and counted as section 5.1 says (the node drops what does not fit a stranger's window
        and returns its cost, 5.3)."""
        self.endpoint = endpoint
        self._first = first_one_way
        self.ping_interval = ping_interval
        self.close_reason = None          # set when the node sent 149 Disconnect
        self.batches_seen = 0             # 139 frames received (for curiosity and tests)
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 200)
        self._sock.setsockopt(zmq.MAXMSGSIZE, 16 * 1024 * 1024)
        self._sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
        self._sock.connect(endpoint)
        self._outbox = queue.Queue()      # (command, key, payload, call or None, deadline)
        self._pending = collections.deque()  # records waiting for credit
        self._calls = {}                  # correlation -> _Call
        self._next_corr = 1
        self._lock = threading.Lock()
        self._credit_msgs = self._credit_bytes = 0   # signed: bytes may go below zero
        self._grants = 0                  # FlowCredits received (2+: the session is accepted)
        self._ready = threading.Event()   # first FlowCredit arrived
        self._closed = threading.Event()
        self._pushes = queue.Queue()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="zlink-io", daemon=True)
        self._thread.start()

    # ---- application side -------------------------------------------------------------

    def credit(self):
        """The credit counters (messages, bytes) as section 5.1 keeps them."""
        return self._credit_msgs, self._credit_bytes

    def wait_ready(self, timeout=10.0):
        """Waits for the node's first credit grant (the session exists)."""
        if not self._ready.wait(timeout):
            raise TimeoutError(f"no FlowCredit from {self.endpoint}")

    def request(self, key, payload=b"", timeout=10.0, named=False):
        """144 Request; returns the 145 reply payload (bytes) or raises ZLinkError.

        `named`: the envelope body in the named form (a map `{key, deadline}`, section 2)
        instead of the array; the node takes both."""
        call = _Call()
        with self._lock:
            corr, self._next_corr = self._next_corr, self._next_corr + 1
        self._submit((REQUEST, key, payload, call, time.monotonic() + timeout, corr, named))
        if not call.done.wait(timeout + 1.0):
            if self._closed.is_set():
                raise SessionClosed(self.close_reason)
            raise TimeoutError(f"no reply to key {key:#x}")
        if call.error is not None:
            raise call.error
        return call.result

    def send(self, key, payload=b""):
        """147 OneWay (no reply)."""
        self._submit((ONE_WAY, key, payload, None, None, 0, False))

    def recv_push(self, timeout=None):
        """The next push as (key, payload bytes); None on timeout or once closed and drained."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return self._pushes.get(timeout=0.05)
            except queue.Empty:
                if self._closed.is_set() and self._pushes.empty():
                    return None
                if deadline is not None and time.monotonic() >= deadline:
                    return None

    def wait_closed(self, timeout=None):
        """Waits until the node ends the session; returns the reason number (None on timeout)."""
        self._closed.wait(timeout)
        return self.close_reason

    def close(self):
        """Says 149 Disconnect and stops (after a node's Disconnect nothing is sent)."""
        self._stop = True
        self._thread.join(5)
        self._sock.close()

    # Framework operations (payloads are named-field msgpack maps).
    def create(self, actor_type, actor_id, node=None, spot=None, init=b"", get_or_create=False):
        body = {"actor_type": actor_type, "actor_id": actor_id, "node": node,
                "spot": spot, "init": init}
        return unpack(self.request(GET_OR_CREATE if get_or_create else CREATE, pack(body)))

    def get(self, actor_id):
        return unpack(self.request(GET, pack({"actor_id": actor_id})))

    def destroy(self, actor_ref):
        unpack(self.request(DESTROY, pack({"actor": actor_ref})))

    def node_info(self):
        return unpack(self.request(NODE_INFO, pack(None)))

    def authenticate(self, credential):
        """AUTHENTICATE: `credential` (bytes) is the node's operator credential; this session may
        do every framework operation afterwards. A wrong one raises ZLinkError InvalidOperation
        ("not authorized: wrong credential")."""
        unpack(self.request(AUTHENTICATE, pack({"credential": bytes(credential)})))

    def call(self, actor_ref, key, message, timeout_ms=0):
        """CALL: `message` is any msgpack-able value; returns the decoded reply."""
        body = {"actor": actor_ref, "key": key, "payload": pack(message), "timeout_ms": timeout_ms}
        return unpack(self.request(CALL, pack(body)))

    def packet(self, key, message, timeout=10.0):
        """A request packet to the node's session application (key < 0xFFFF0000)."""
        return unpack(self.request(key, pack(message), timeout))

    # ---- I/O thread ---------------------------------------------------------------------

    def _submit(self, item):
        if self._closed.is_set():
            raise SessionClosed(self.close_reason)
        self._outbox.put(item)

    def _raw(self, frames):
        try:
            self._sock.send_multipart(frames, zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def _run(self):
        seq, next_ping = 0, 0.0
        if self._first is not None:
            env = envelope(ONE_WAY, HAS_PAYLOAD, 0, [self._first[0]])
            self._sock.send_multipart([env, self._first[1]])
            self._credit_msgs -= 1
            self._credit_bytes -= len(env) + len(self._first[1])
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop and not self._closed.is_set():
            now = time.monotonic()
            if now >= next_ping:                  # liveness: the node drops silent clients
                seq += 1
                if self._raw([envelope(PING, 0, 0, [seq])]):
                    next_ping = now + self.ping_interval
            while True:
                try:
                    self._pending.append(self._outbox.get_nowait())
                except queue.Empty:
                    break
            self._flush()
            if not poller.poll(5):
                continue
            for _ in range(256):                  # read what is there, then ping/send again
                try:
                    parts = self._sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._on_message(parts)
                if self._closed.is_set():
                    break
        if not self._closed.is_set():             # our own goodbye (reason is not read)
            self._raw([envelope(DISCONNECT, 0, 0, [1])])
            self._closed.set()
        # Requests in flight, or never sent, end now (nothing is ever resent).
        while True:
            try:
                self._pending.append(self._outbox.get_nowait())
            except queue.Empty:
                break
        calls = list(self._calls.values()) + [p[3] for p in self._pending if p[3] is not None]
        for call in calls:
            call.error = SessionClosed(self.close_reason)
            call.done.set()
        self._calls.clear()
        self._pending.clear()

    def _flush(self):
        """Sends queued requests/one-ways in order while credit lasts (one record each)."""
        while self._pending and self._credit_msgs > 0 and self._credit_bytes > 0:
            command, key, payload, call, deadline, corr, named = self._pending[0]
            if command == REQUEST:
                remaining = int((deadline - time.monotonic()) * 1000)
                if remaining <= 0:                # never send a request past its deadline
                    self._pending.popleft()
                    call.error = ZLinkError(4, "deadline passed before sending")
                    call.done.set()
                    continue
                fields = [key, min(remaining, 0xFFFFFFFF)]
                if named:
                    fields = {"key": fields[0], "deadline": fields[1]}
                env = envelope(REQUEST, HAS_PAYLOAD, corr, fields)
            else:
                env = envelope(ONE_WAY, HAS_PAYLOAD, 0, [key])
            if self._grants < 2 and len(env) + len(payload) > self._credit_bytes:
                return                            # a stranger's window is not overdrawn (5.1)
            if call is not None:
                self._calls[corr] = call
            if not self._raw([env, payload]):
                self._calls.pop(corr, None)
                return                            # libzmq is full: retry on the next pass
            self._pending.popleft()
            self._credit_msgs -= 1
            self._credit_bytes -= len(env) + len(payload)

    def _on_message(self, parts):
        if len(parts) == 1 and len(parts[0]) >= 12 and parts[0][1] == BATCH:
            self.batches_seen += 1
            for env, payload in parse_batch(parts[0]):
                self._on_record(env, payload, in_batch=True)
        elif len(parts) in (1, 2):
            self._on_record(parts[0], parts[1] if len(parts) == 2 else None, in_batch=False)

    def _on_record(self, env, payload, in_batch):
        command, flags, corr, fields = parse_envelope(env)
        if command == FLOW_CREDIT and not in_batch:
            self._credit_msgs += fields[0]
            self._credit_bytes += fields[1]
            self._grants += 1
            self._ready.set()
        elif command == PUSH:
            self._pushes.put((fields[0], payload))
        elif command in (REPLY_CMD, ERROR_REPLY):
            call = self._calls.pop(corr, None)
            if call is None:
                return                            # a late reply: the request already ended
            if command == REPLY_CMD:
                call.result = payload
            else:
                call.error = ZLinkError(fields[0], fields[1])
            call.done.set()
        elif command == DISCONNECT and not in_batch:
            self.close_reason = fields[0]
            self._closed.set()
        # PONG: the node is alive. Anything else is ignored.
