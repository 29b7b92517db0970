"""Hostile and polite HTTP/2 clients against the guest, for tests/tests/http2.rs.

Run with Debian's python3 (python3-h2 and python3-hpack from tools/setup.sh):
    python3 h2_hostile.py PORT CA_FILE BIG_PATH
BIG_PATH names a large file of the site (megabytes), for the many-streams case.
Connects to 127.0.0.1:PORT over TLS (ALPN h2, SNI bramble.test) and prints one line per
case: `case: NAME RESULT`. The Rust test judges the results; this script only reports.
Every read is bounded by a socket timeout, every loop by a count.
"""

import socket
import ssl
import struct
import sys
import threading
import time

import h2.config
import h2.connection
import h2.events
import hpack

PORT = int(sys.argv[1])
CA = sys.argv[2]
BIG = sys.argv[3]
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 2, 3, 4, 6, 7, 8, 9)
END_STREAM, END_HEADERS = 0x1, 0x4


def connect():
    context = ssl.create_default_context(cafile=CA)
    context.set_alpn_protocols(["h2", "http/1.1"])
    raw = socket.create_connection(("127.0.0.1", PORT), timeout=20)
    tls = context.wrap_socket(raw, server_hostname="bramble.test")
    return tls


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def request_block(path, encoder=None):
    encoder = encoder or hpack.Encoder()
    return encoder.encode([(":method", "GET"), (":scheme", "https"), (":path", path),
                           (":authority", "bramble.test")])


class Reader:
    """Reads frames from a socket, bounded in time."""

    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""
        self.closed = False

    def frames(self, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline and not self.closed:
            while len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) < 9 + length:
                    break
                kind, flags = self.buffer[3], self.buffer[4]
                stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
                payload = self.buffer[9:9 + length]
                self.buffer = self.buffer[9 + length:]
                yield kind, flags, stream, payload
            self.sock.settimeout(max(0.1, deadline - time.time()))
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, ssl.SSLError, OSError):
                return
            if not chunk:
                self.closed = True
                return
            self.buffer += chunk


def goaway_code(reader, seconds=15):
    for kind, _, _, payload in reader.frames(seconds):
        if kind == GOAWAY:
            return struct.unpack(">I", payload[4:8])[0]
    return "none" if not reader.closed else "closed"


def start(sock, settings=b""):
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))


def report(name, result):
    print(f"case: {name} {result}", flush=True)


def polite_get(sock, path="/"):
    """A GET with the h2 library; returns the status, or a reason."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    sock.sendall(connection.data_to_send())
    stream = connection.get_next_available_stream_id()
    connection.send_headers(stream, [(":method", "GET"), (":scheme", "https"), (":path", path),
                                     (":authority", "bramble.test")], end_stream=True)
    sock.sendall(connection.data_to_send())
    status, body = None, b""
    deadline = time.time() + 15
    while time.time() < deadline:
        sock.settimeout(max(0.1, deadline - time.time()))
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, ssl.SSLError, OSError):
            break
        if not chunk:
            break
        for event in connection.receive_data(chunk):
            if isinstance(event, h2.events.ResponseReceived):
                status = dict(event.headers).get(b":status", b"?").decode()
            elif isinstance(event, h2.events.DataReceived):
                body += event.data
                connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                return f"{status} {len(body)}"
        sock.sendall(connection.data_to_send())
    return f"unfinished {status}"


def many_streams_beside_a_polite_client():
    """One connection asks for the large file on 100 streams, as many at once as the server's
    SETTINGS_MAX_CONCURRENT_STREAMS allows and a new one each time one ends, with windows so
    wide that flow control never holds the server back, and reads everything as it comes.
    Once its first DATA frame is in, a second client connects (a full TLS handshake) and asks
    for /. Fair turns answer the second client while the first still has streams to finish.
    Returns `polite=RESULT ended_at_polite=N ended=N refused=N goaway=CODE bytes=N`."""
    greedy = connect()
    start(greedy, struct.pack(">HI", 4, 0x7FFFFFFF))  # SETTINGS_INITIAL_WINDOW_SIZE
    greedy.sendall(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7FFFFFFF - 65535)))
    encoder = hpack.Encoder()
    state = {"bytes": 0, "ended": 0, "refused": 0, "goaway": "none", "opened": 0}
    first_data = threading.Event()
    done = threading.Event()
    total = 100

    def open_streams(count):
        burst = b""
        for _ in range(count):
            if state["opened"] >= total:
                break
            burst += frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * state["opened"],
                           request_block(BIG, encoder))
            state["opened"] += 1
        if burst:
            greedy.sendall(burst)

    def read():
        # Bounded: 100 streams, 180 s.
        limit = None
        for kind, flags, _, payload in Reader(greedy).frames(180):
            if kind == SETTINGS and not flags & 0x1:
                greedy.sendall(frame(SETTINGS, 0x1, 0))
                if limit is None:
                    limit = 100
                    for i in range(0, len(payload) - 5, 6):
                        key, value = struct.unpack(">HI", payload[i:i + 6])
                        if key == 3:  # SETTINGS_MAX_CONCURRENT_STREAMS
                            limit = max(1, min(value, 100))
                    open_streams(limit)
            elif kind == DATA:
                state["bytes"] += len(payload)
                first_data.set()
                if flags & END_STREAM:
                    state["ended"] += 1
                    open_streams(1)
            elif kind == HEADERS and flags & END_STREAM:
                state["ended"] += 1
                open_streams(1)
            elif kind == RST_STREAM:
                state["refused"] += 1
                open_streams(1)
            elif kind == GOAWAY:
                state["goaway"] = struct.unpack(">I", payload[4:8])[0]
                break
            if state["ended"] + state["refused"] >= total:
                break
        first_data.set()
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    first_data.wait(60)
    with connect() as sock:
        polite = polite_get(sock).replace(" ", "/")
    ended_at_polite = state["ended"]
    done.wait(180)
    reader.join(5)
    greedy.close()
    return (f"polite={polite} ended_at_polite={ended_at_polite} ended={state['ended']} "
            f"refused={state['refused']} goaway={state['goaway']} bytes={state['bytes']}")


def main():
    # The zero-window stall runs beside the other cases: it takes the stall limit (10 s).
    stall = connect()
    start(stall, struct.pack(">HI", 4, 0))  # SETTINGS_INITIAL_WINDOW_SIZE = 0
    stall.sendall(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block("/index.html")))
    stall_started = time.time()

    with connect() as sock:
        report("alpn", sock.selected_alpn_protocol())
        report("polite", polite_get(sock))

    # Rapid reset: open and cancel 1,000 streams.
    with connect() as sock:
        start(sock)
        encoder = hpack.Encoder()
        burst = b""
        for i in range(1000):
            stream = 1 + 2 * i
            burst += frame(HEADERS, END_STREAM | END_HEADERS, stream, request_block("/", encoder))
            burst += frame(RST_STREAM, 0, stream, struct.pack(">I", 8))
        try:
            sock.sendall(burst)
        except OSError:
            pass
        report("rapid_reset", goaway_code(Reader(sock)))

    # CONTINUATION flood: a header block that never ends.
    with connect() as sock:
        start(sock)
        flood = frame(HEADERS, 0, 1, request_block("/"))
        flood += frame(CONTINUATION, 0, 1, b"") * 5000
        try:
            sock.sendall(flood)
        except OSError:
            pass
        report("continuation_flood", goaway_code(Reader(sock)))

    # PING and SETTINGS floods, never read.
    for name, one in [("ping_flood", frame(PING, 0, 0, b"12345678")),
                      ("settings_flood", frame(SETTINGS, 0, 0, b""))]:
        with connect() as sock:
            start(sock)
            try:
                sock.sendall(one * 3000)
            except OSError:
                pass
            report(name, goaway_code(Reader(sock)))

    # HPACK bomb: a 4,000-byte table entry named 2,000 times; then a polite request on the
    # same connection.
    with connect() as sock:
        start(sock)
        block = request_block("/")
        block += b"\x40\x05x-big\x7f" + bytes([(4000 - 127) & 0x7F | 0x80, (4000 - 127) >> 7]) + b"a" * 4000
        block += b"\xbe" * 2000
        sock.sendall(frame(HEADERS, END_STREAM, 1, block[:3000]) +
                     frame(CONTINUATION, END_HEADERS, 1, block[3000:]))
        decoder = hpack.Decoder()
        status = "none"
        reader = Reader(sock)
        for kind, _, stream, payload in reader.frames(15):
            if kind == HEADERS and stream == 1:
                status = dict(decoder.decode(payload)).get(":status")
                break
        sock.sendall(frame(HEADERS, END_STREAM | END_HEADERS, 3, request_block("/")))
        after = "none"
        for kind, _, stream, payload in reader.frames(15):
            if kind == HEADERS and stream == 3:
                after = dict(decoder.decode(payload)).get(":status")
                break
        report("hpack_bomb", f"{status} then {after}")

    # A dependency loop and a self-dependency, then a request on the same connection.
    with connect() as sock:
        start(sock)
        loop = b""
        for _ in range(300):
            loop += frame(PRIORITY, 0, 1, struct.pack(">IB", 3, 16))
            loop += frame(PRIORITY, 0, 3, struct.pack(">IB", 5, 16))
            loop += frame(PRIORITY, 0, 5, struct.pack(">IB", 1, 16))
        loop += frame(PRIORITY, 0, 7, struct.pack(">IB", 7, 16))
        loop += frame(HEADERS, END_STREAM | END_HEADERS, 9, request_block("/"))
        sock.sendall(loop)
        reset, status = "none", "none"
        decoder = hpack.Decoder()
        for kind, _, stream, payload in Reader(sock).frames(15):
            if kind == RST_STREAM and stream == 7:
                reset = struct.unpack(">I", payload)[0]
            if kind == HEADERS and stream == 9:
                status = dict(decoder.decode(payload)).get(":status")
            if reset != "none" and status != "none":
                break
        report("dependency_loop", f"{reset} {status}")

    # The stall: headers come, no data; the stream is cancelled after the limit.
    reader = Reader(stall)
    outcome = "none"
    for kind, _, stream, payload in reader.frames(max(1, 25 - (time.time() - stall_started))):
        if kind == DATA and stream == 1 and payload:
            outcome = "data"
            break
        if kind == RST_STREAM and stream == 1:
            outcome = f"rst {struct.unpack('>I', payload)[0]} after {int(time.time() - stall_started)} s"
            break
    report("zero_window", outcome)
    stall.close()

    # One connection with 100 streams does not starve another client.
    report("many_streams", many_streams_beside_a_polite_client())

    # The server still serves a polite client.
    with connect() as sock:
        report("polite_after", polite_get(sock))


main()
