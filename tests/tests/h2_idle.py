"""Idle HTTP/2 connections held open against the guest, for tests/tests/http2.rs.

Run with Debian's python3 (python3-h2 from tools/setup.sh):
    python3 h2_idle.py PORT CA_FILE COUNT
Opens COUNT TLS connections to 127.0.0.1:PORT (ALPN h2, SNI bramble.test), asks each for /
with Python's h2 library (whose HPACK encoder indexes the request's fields into the server's
dynamic table), and keeps them all open, idle. Prints `idle: opened N served M`, then waits
for a line on stdin (at most 120 s): the Rust test serves other clients meanwhile. Then each
idle connection asks for / again, its fields now references to the dynamic table it filled
before, and it prints `again: served M of N`. Every read is bounded by a socket timeout,
every loop by a count.
"""

import select
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events

PORT = int(sys.argv[1])
CA = sys.argv[2]
COUNT = int(sys.argv[3])
REQUEST = [(":method", "GET"), (":scheme", "https"), (":path", "/"),
           (":authority", "bramble.test"), ("user-agent", "bramble-h2-idle-test/1"),
           ("accept", "text/html,application/xhtml+xml")]


class Client:
    def __init__(self):
        context = ssl.create_default_context(cafile=CA)
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", PORT), timeout=30)
        self.sock = context.wrap_socket(raw, server_hostname="bramble.test")
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.sock.sendall(self.h2.data_to_send())

    def get(self):
        """One GET /; the status and body length, or why not."""
        stream = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream, REQUEST, end_stream=True)
        self.sock.sendall(self.h2.data_to_send())
        status, body = None, 0
        deadline = time.time() + 30
        while time.time() < deadline:
            self.sock.settimeout(max(0.1, deadline - time.time()))
            try:
                chunk = self.sock.recv(65536)
            except (socket.timeout, ssl.SSLError, OSError) as error:
                return f"error {error}"
            if not chunk:
                return "closed"
            ended = False
            for event in self.h2.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream:
                    status = dict(event.headers).get(b":status", b"?").decode()
                elif isinstance(event, h2.events.DataReceived):
                    body += len(event.data)
                    self.h2.acknowledge_received_data(event.flow_controlled_length,
                                                      event.stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                    ended = True
                elif isinstance(event, h2.events.ConnectionTerminated):
                    return f"goaway {event.error_code}"
            self.sock.sendall(self.h2.data_to_send())
            if ended:
                return f"{status} {body}"
        return f"unfinished {status}"


def main():
    clients, served = [], 0
    for _ in range(COUNT):
        try:
            client = Client()
        except OSError as error:
            print(f"connect failed: {error}", flush=True)
            continue
        result = client.get()
        served += result.startswith("200 ")
        if not result.startswith("200 "):
            print(f"first request: {result}", flush=True)
        clients.append(client)
    print(f"idle: opened {len(clients)} served {served}", flush=True)
    ready, _, _ = select.select([sys.stdin], [], [], 120)
    if ready:
        sys.stdin.readline()
    again = 0
    for client in clients:
        result = client.get()
        again += result.startswith("200 ")
        if not result.startswith("200 "):
            print(f"second request: {result}", flush=True)
    print(f"again: served {again} of {len(clients)}", flush=True)
    for client in clients:
        client.sock.close()


main()
