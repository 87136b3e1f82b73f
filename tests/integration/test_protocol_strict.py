"""test_protocol_strict.py - the frontend holds clients to docs/PROTOCOL.md and never
leaves one without an answer: a request whose id is not UTF-8 gets an error with a nil
id; a str that is not UTF-8, a key given twice, an empty prompt or session are refused
with bad_request naming the field; a multi-part message (and a REQ socket) is refused
with one error and nothing of it is served; a frame over the libzmq limit drops the
connection and cancels its requests, as documented.  After each, the service still
serves.  Every wait is bounded; the server is always stopped."""
import sys
import time

import serve_util as u  # first: it skips without the model, zmq or msgpack
import msgpack
import zmq

WAIT = 10  # seconds any answer may take


def raw_map(*pairs):
    """A MessagePack map written pair by pair (so that a key may appear twice, or a str
    hold any bytes: a bytes value is written as a MessagePack str, not bin)."""
    out = bytearray([0x80 | len(pairs)] if len(pairs) < 16 else [0xde, 0, len(pairs)])
    for k, v in pairs:
        for x in (k, v):
            if isinstance(x, bytes):
                out += bytes([0xd9, len(x)]) + x if len(x) > 31 else bytes([0xa0 | len(x)]) + x
            else:
                out += msgpack.packb(x)
    return bytes(out)


def expect_error(c, frame, what, id_, field=None):
    c.send(frame)
    t0 = time.time()
    m = c.recv(WAIT)
    u.check(m["type"] == "error" and m["code"] == "bad_request", "%s: got %r" % (what, m))
    u.check(m["id"] == id_, "%s: error id %r, expected %r" % (what, m["id"], id_))
    if field:
        u.check("'%s'" % field in m["message"], "%s: message %r does not name %r"
                % (what, m["message"], field))
    print("%-28s -> error (id %r) in %.0f ms: %s" % (what, m["id"], 1000 * (time.time() - t0),
                                                     m["message"]))
    return m


def serve_one(c, rid):
    """A normal request on client c ends with done."""
    c.send(u.chat_request(rid, "Say hello.", 4))
    while True:
        m = c.recv(60)
        u.check(m.get("id") == rid, "unexpected event %r" % m)
        if m["type"] != "token":
            break
    u.check(m["type"] == "done", "request %s: %r" % (rid, m))


def test_strict_frames(ep):
    c = u.Client(zmq.Context.instance(), ep)
    gen = [("type", "generate"), ("v", 1)]
    expect_error(c, raw_map(*gen, ("id", b"bad\xed\xa0\x80"), ("prompt", "hi")),
                 "id not UTF-8 (surrogate)", None, "id")
    expect_error(c, raw_map(*gen, ("id", b"\xc0\xaf"), ("prompt", "hi")),
                 "id not UTF-8 (overlong)", None, "id")
    expect_error(c, raw_map(("type", "cancel"), ("id", b"x\xff")), "cancel id not UTF-8", None,
                 "id")
    expect_error(c, raw_map(*gen, ("id", "p1"), ("prompt", b"caf\xc3")),
                 "prompt not UTF-8", "p1", "prompt")
    expect_error(c, raw_map(*gen, ("id", "p2"), ("prompt", "hi"), ("note", b"\xf4\x90\x80\x80")),
                 "unknown key not UTF-8", "p2", "note")
    expect_error(c, raw_map(*gen, ("type", "generate"), ("id", "d1"), ("prompt", "hi")),
                 "type given twice", "d1", "type")
    expect_error(c, raw_map(*gen, ("id", "d2"), ("prompt", "hi"), ("max_tokens", 2),
                            ("max_tokens", 3)), "max_tokens given twice", "d2", "max_tokens")
    expect_error(c, raw_map(*gen, ("id", "d3"), ("prompt", "hi"), ("id", "d4")),
                 "id given twice", None, "id")
    expect_error(c, u.pack({"type": "generate", "id": "e1", "prompt": ""}), "empty prompt", "e1",
                 "prompt")
    expect_error(c, u.pack({"type": "generate", "id": "e2", "prompt": "hi", "session": ""}),
                 "empty session", "e2", "session")
    m = expect_error(c, u.pack({"type": "generate", "id": "big", "prompt": "a" * (2 << 20)}),
                     "2 MiB frame", "big")
    u.check("exceeds the limit" in m["message"], "2 MiB frame: %r" % m)
    serve_one(c, "after-strict")
    c.close()


def test_multipart(ep):
    """A message of two frames is refused with one error (the id of its last frame) and
    not served; a REQ socket's request is refused with an error that REQ can read."""
    c = u.Client(zmq.Context.instance(), ep)
    c.sock.send_multipart([u.pack({"type": "stats"}),
                           u.pack(u.chat_request("mp1", "Say hello.", 4))])
    m = c.recv(WAIT)
    u.check(m["type"] == "error" and m["code"] == "bad_request" and m["id"] == "mp1",
            "multi-part: %r" % m)
    print("%-28s -> error (id %r): %s" % ("two-frame message", m["id"], m["message"]))
    c.sock.send_multipart([b"", u.pack(u.chat_request("mp2", "Say hello.", 4))])
    parts = c.sock.recv_multipart() if c.sock.poll(WAIT * 1000) else None
    u.check(parts and len(parts) == 2 and parts[0] == b"", "REQ-style: %r" % parts)
    m = u.unpack(parts[1])
    u.check(m["type"] == "error" and m["id"] == "mp2", "REQ-style: %r" % m)
    # nothing of either was served: the next event on this socket is the next request's
    serve_one(c, "after-multipart")
    c.close()
    req = zmq.Context.instance().socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(ep)
    req.send(u.pack(u.chat_request("req1", "Say hello.", 4)))
    u.check(req.poll(WAIT * 1000), "REQ socket: no answer")
    m = u.unpack(req.recv())
    u.check(m["type"] == "error" and m["code"] == "bad_request", "REQ socket: %r" % m)
    print("%-28s -> error (id %r): %s" % ("REQ socket", m["id"], m["message"]))
    req.close(0)


def test_frame_over_limit(ep):
    """A frame over the socket's limit (4 MiB) drops the connection: its running stream is
    cancelled (frontend.cancelled.disconnect) and gets no further event; the DEALER
    reconnects by itself and the same socket is served again."""
    before = u.stats(ep).get("frontend.cancelled.disconnect", 0)
    c = u.Client(zmq.Context.instance(), ep)
    mon = c.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    c.send({"type": "generate", "id": "s1", "prompt": "Once upon a time", "max_tokens": 1000,
            "temperature": 0})
    m = c.recv(60)
    u.check(m["type"] == "token", "stream did not start: %r" % m)
    c.send(b"\x80" * (50 << 20))
    u.check(mon.poll(WAIT * 1000), "no DISCONNECTED event on the client after a 50 MB frame")
    u.wait_for(lambda: u.stats(ep).get("frontend.cancelled.disconnect", 0) > before, WAIT,
               "the stream of the dropped connection to be cancelled")
    while c.sock.poll(500):  # events sent before the drop may still be in the pipe
        m = c.recv(1)
        u.check(m["type"] == "token" and m["id"] == "s1", "after the drop: %r" % m)
    print("50 MB frame: connection dropped, stream s1 cancelled (no done), as documented")
    c.sock.disable_monitor()
    mon.close(0)
    serve_one(c, "after-drop")
    c.close()


def main():
    with u.Server(["--threads", "1"]) as s:
        test_strict_frames(s.endpoint)
        test_multipart(s.endpoint)
        test_frame_over_limit(s.endpoint)
        st = u.stats(s.endpoint)
        for k in ("bad_utf8", "duplicate_key", "envelope", "too_big", "out_of_range"):
            u.check(st.get("frontend.malformed." + k, 0) > 0, "no frontend.malformed." + k)
    print("ok")


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
