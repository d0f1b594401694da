"""Scenario run by tests/python_client.rs against two in-process nodes (demo session app).

    python3 test_session.py ENDPOINT ACTOR_REF_HEX

ACTOR_REF_HEX is the msgpack (named-field map) of an `echo` actor's ActorRef. The script prints
one line per step on stdout; the Rust test waits on them. After "ready-for-replace" the Rust test
binds the same actor from another session; the script then expects the demo push `Replaced`
(key 100) and the node's 149 Disconnect with reason Replaced (4). Exit status 0 = all checks held.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zlink_client as z  # noqa: E402

GUARD = 20.0
# Demo session application packets (apps/src/demo.rs, docs/CLIENT-PROTOCOL.md).
BIND, RELAY_REQUEST, RELAY_SEND, BOUND, REPLACED = 1, 3, 4, 7, 100
# Demo `echo` actor messages.
ECHO, ECHO_PUSH = 10, 11
# Demo `sequence` actor messages.
SEQ_NEXT, SEQ_CHECKED = 50, 51
# NODE_INFO's fields (section 7).
NODE_INFO_FIELDS = {"node", "generation", "mesh", "peers_up", "peers", "actor_types",
                    "local_actors", "sessions", "session_rejects", "mesh_drops",
                    "client_refusals"}


def step(line):
    print(line, flush=True)


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


def golden_batch_selftest():
    """The batch parser against the wire's golden fixture (147, 144, 160 sub-records)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "..", "wire", "tests", "golden", "139_batch.hex")
    with open(path) as f:
        hexframe = [l.split()[1] for l in f if l.startswith("frame ")][0]
    records = z.parse_batch(bytes.fromhex(hexframe))
    check([env[1] for env, _ in records] == [147, 144, 160], "golden batch commands")
    check(z.parse_envelope(records[1][0]) == (144, 1, 0x0102030405060708, [7, 1000]),
          "golden batch 144 envelope")
    check(records[1][1] == b"req", "golden batch 144 payload")


def main():
    endpoint, ref_hex = sys.argv[1], sys.argv[2]
    golden_batch_selftest()
    actor = z.unpack(bytes.fromhex(ref_hex))
    # The first record is a one-way larger than a stranger's window (16 KiB), sent before any
    # credit: the node drops it (CreditExceeded) and returns its cost (section 5.3).
    c = z.Client(endpoint, first_one_way=(ECHO, b"x" * 20000))
    c.wait_ready(GUARD)
    step("connected")

    # Framework operations: NODE_INFO, GET (same ref as the one given), CALL.
    info = c.node_info()
    check(info["node"] == "a" and "echo" in info["actor_types"], f"node info {info}")
    check(set(info) == NODE_INFO_FIELDS, f"NODE_INFO has the documented fields: {sorted(info)}")
    check(set(info["actor_types"]) >= {"counter", "echo", "room", "failing", "sequence"},
          f"the documented demo types: {info['actor_types']}")
    # The envelope body in the named form (a map) is taken too.
    named = z.unpack(c.request(z.NODE_INFO, z.pack(None), GUARD, named=True))
    check(named["node"] == "a", f"NODE_INFO with a map body: {named}")
    check(c.get(actor["actor_id"]) == actor, "GET returns the same ActorRef")
    check(c.call(actor, ECHO, b"direct", timeout_ms=5000) == b"direct", "CALL Echo")
    try:
        c.get("no-such-actor")
        check(False, "GET of an unknown actor must fail")
    except z.ZLinkError as e:
        check(e.kind == 3, f"GET unknown: NotFound, got {e}")
    # AUTHENTICATE: this node has no operator credential, so any credential is refused.
    try:
        c.authenticate(b"not-the-credential")
        check(False, "a wrong credential must be refused")
    except z.ZLinkError as e:
        check(e.kind == 2 and e.detail.startswith("not authorized"), f"AUTHENTICATE: {e}")
    # Without a binding: a push is session-not-bound, InvalidOperation (the actor's EchoPush),
    # and so is a relay, counted in NODE_INFO's session_rejects.
    try:
        c.call(actor, ECHO_PUSH, b"nobody", timeout_ms=5000)
        check(False, "EchoPush without a bound session must fail")
    except z.ZLinkError as e:
        check(e.kind == 2, f"EchoPush unbound: InvalidOperation, got {e}")
    before = c.node_info()["session_rejects"].get("relay/session_not_bound", 0)
    try:
        c.packet(RELAY_REQUEST, {"actor_id": actor["actor_id"], "key": ECHO,
                                 "payload": z.pack(b"x"), "timeout_ms": 5000}, GUARD)
        check(False, "a relay without a binding must fail")
    except z.ZLinkError as e:
        check(e.kind == 2, f"relay unbound: InvalidOperation, got {e}")
    after = c.node_info()["session_rejects"].get("relay/session_not_bound", 0)
    check(after == before + 1, f"relay/session_not_bound counted: {before} -> {after}")
    # The sequence demo actor: Next(n) in order, Checked = (next expected, out of order).
    seq = c.create("sequence", "py-seq")
    for n in (0, 1, 3):
        check(c.call(seq, SEQ_NEXT, n) is None, "Next replies nil")
    check(c.call(seq, SEQ_CHECKED, []) == [4, 1], "Checked after 0, 1, 3")
    step("framework ok")

    # Demo session app: bind, relay a request, relay a push (request and one-way).
    bound = c.packet(BIND, {"actor": actor}, GUARD)
    check(bound["actor_id"] == actor["actor_id"], f"bound ref {bound}")
    step("bound")
    reply = c.packet(RELAY_REQUEST, {"actor_id": actor["actor_id"], "key": ECHO,
                                     "payload": z.pack(b"hello"), "timeout_ms": 5000}, GUARD)
    check(z.unpack(reply) == b"hello", f"relayed Echo reply {reply!r}")
    step("echo ok")
    reply = c.packet(RELAY_REQUEST, {"actor_id": actor["actor_id"], "key": ECHO_PUSH,
                                     "payload": z.pack(b"pushed"), "timeout_ms": 5000}, GUARD)
    check(z.unpack(reply) is None, f"EchoPush replies () = nil, got {reply!r}")
    push = c.recv_push(GUARD)
    check(push is not None and push[0] == ECHO and z.unpack(push[1]) == b"pushed",
          f"push {push!r}")
    step("push ok")
    for i in range(20):                         # one-way packets: RelaySend of EchoPush
        c.send(RELAY_SEND, z.pack({"actor_id": actor["actor_id"], "key": ECHO_PUSH,
                                   "payload": z.pack(b"n%d" % i)}))
    got = [c.recv_push(GUARD) for _ in range(20)]
    check(all(p is not None and p[0] == ECHO for p in got), f"one-way pushes {got!r}")
    check(sorted(z.unpack(p[1]) for p in got) == sorted(b"n%d" % i for i in range(20)),
          "one-way push payloads")
    bound_list = c.packet(BOUND, [])
    check([r["actor_id"] for r in bound_list] == [actor["actor_id"]], f"Bound {bound_list}")
    step(f"oneway ok batches={c.batches_seen}")

    # Flow credit as section 5 says: the stranger's grant, then the rest once accepted, every
    # record's full cost returned: with nothing in flight the counters are the whole window.
    deadline = time.monotonic() + GUARD
    while c.credit() != (4096, 1024 * 1024) and time.monotonic() < deadline:
        time.sleep(0.01)
    check(c.credit() == (4096, 1024 * 1024), f"credit back to the window, got {c.credit()}")
    step("credit ok")

    # Replacement: the Rust test binds the same actor from another session now.
    step("ready-for-replace")
    push = c.recv_push(GUARD)
    check(push is not None and push[0] == REPLACED, f"Replaced push, got {push!r}")
    step(f"replaced {z.unpack(push[1])['actor_id']}")
    reason = c.wait_closed(GUARD)
    check(reason is not None, "no Disconnect from the node")
    step(f"closed {reason}")
    try:
        c.packet(BOUND, [])
        check(False, "a request after the close must fail")
    except z.SessionClosed as e:
        check(e.reason == reason, f"SessionClosed reason {e.reason}")
    c.close()


if __name__ == "__main__":
    main()
