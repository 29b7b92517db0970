"""A dyndns2 provider, an IPv4 echo service and an outside checker, for tests/tests/dyndns.rs.

Run with Debian's python3 (standard library only) inside the test's namespace:
    python3 dyndns_endpoint.py ADDRESS PORT CERT KEY STATE_DIR
Serves HTTPS on ADDRESS:PORT with CERT/KEY. The test steers it through files in STATE_DIR:
  echo    the address GET /ip answers (text, as api.ipify.org does)
  mode    `good` (default) or `badauth`: how GET /nic/update answers
and reads what it saw from STATE_DIR/requests.log, one line a request:
  `ip`, `check`, or `update AUTH QUERY ANSWER` (AUTH: `ok`, `none` or `wrong`).
GET /nic/update follows the dyndns2 protocol: Basic authentication as owner:s3cret, then
`good MYIP` when the address differs from the one held, `nochg MYIP` when not; `badauth` (401)
when the credentials are wrong or the mode says so. GET /check answers `OK`.
"""

import base64
import http.server
import os
import ssl
import sys
import urllib.parse

ADDRESS, PORT, CERT, KEY, STATE = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
CREDENTIALS = "Basic " + base64.b64encode(b"owner:s3cret").decode()
HELD = {}


def state(name, default):
    try:
        with open(os.path.join(STATE, name)) as f:
            return f.read().strip() or default
    except OSError:
        return default


def log(line):
    with open(os.path.join(STATE, "requests.log"), "a") as f:
        f.write(line + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/ip":
            log("ip")
            self.answer(200, state("echo", "203.0.113.7") + "\n")
        elif url.path == "/check":
            log("check")
            self.answer(200, "OK\n")
        elif url.path == "/nic/update":
            given = self.headers.get("Authorization")
            auth = "none" if given is None else ("ok" if given == CREDENTIALS else "wrong")
            query = urllib.parse.parse_qs(url.query)
            if auth != "ok" or state("mode", "good") == "badauth":
                status, text = 401, "badauth"
            else:
                name = query.get("hostname", [""])[0]
                wanted = (query.get("myip", [""])[0], query.get("myipv6", [""])[0])
                word = "nochg" if HELD.get(name) == wanted else "good"
                HELD[name] = wanted
                status, text = 200, f"{word} {wanted[0]}"
            log(f"update {auth} {url.query} {text.split()[0]}")
            self.answer(status, text + "\n")
        else:
            self.answer(404, "not here\n")

    def log_message(self, *args):
        pass


server = http.server.HTTPServer((ADDRESS, PORT), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(CERT, KEY)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("listening", flush=True)
server.serve_forever()
