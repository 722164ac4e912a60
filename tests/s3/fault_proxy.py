#!/usr/bin/env python3
"""tests/s3/fault_proxy.py — a small fault-injecting HTTP proxy in front of an S3 endpoint.

    fault_proxy.py UPSTREAM_URL RULE PORT_FILE [CONTROL_FILE]

Listens on a free port of 127.0.0.1 (written to PORT_FILE once it listens) and forwards
every request unchanged (the Host header too, so SigV4 signatures stay valid) to
UPSTREAM_URL, except the ones RULE picks, which it answers itself:
    none                 forward everything (faults come from CONTROL_FILE only)
    slowdown-every-N     every N-th PUT: 503 SlowDown (an S3 error body, like AWS)
    forbid-put-MATCH     every PUT whose path contains MATCH: 403 AccessDenied

CONTROL_FILE switches an outage on and off while the proxy runs: it is read before every
request (a missing or empty file, or "up", means no outage). Its first word is the mode,
optionally followed by ":MATCH" (only requests whose path contains MATCH are hit):
    503                  every request, HEAD included, answered 503 SlowDown (HEAD without
                         a body, as a server does)
    reset                the connection is reset (RST) before any answer
    slow-SECONDS         the answer is delayed by SECONDS, then forwarded
    head-no-length       HEAD answered 200 without Content-Length (a broken middlebox);
                         everything else forwarded
    short-body           GET answered with the real status and Content-Length, but only
                         half of the body before the connection is closed
    500-put              every PUT and POST answered 500 InternalError; reads forwarded
Each injected fault is one line on stdout ("injected 503 PUT /bucket/key"), flushed.
Writing the control file atomically (write a temporary file, rename it) avoids a
request reading it half-written.
"""
import http.client
import http.server
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse

upstream = urllib.parse.urlparse(sys.argv[1])
rule = sys.argv[2]
port_file = sys.argv[3]
control_file = sys.argv[4] if len(sys.argv) > 4 else None
lock = threading.Lock()
puts = 0


def outage_mode(path):
    """The outage mode the control file sets for a request on path, or None."""
    if not control_file:
        return None
    try:
        with open(control_file) as f:
            words = f.read().split()
    except OSError:
        return None
    if not words or words[0] == "up":
        return None
    mode, _, match = words[0].partition(":")
    if match and match not in path:
        return None
    return mode


def fault(method, path):
    global puts
    if method != "PUT":
        return None
    with lock:
        puts += 1
        n = puts
    if rule.startswith("slowdown-every-"):
        every = int(rule[len("slowdown-every-"):])
        if n % every == 0:
            return 503, "SlowDown", "Please reduce your request rate."
    elif rule.startswith("forbid-put-"):
        if rule[len("forbid-put-"):] in path:
            return 403, "AccessDenied", "injected by fault_proxy.py"
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer_error(self, status, code, message):
        payload = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code><Message>%s</Message>"
                   "</Error>" % (code, message)).encode()
        print("injected %d %s %s" % (status, self.command, self.path), flush=True)
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def reset(self):
        print("injected reset %s %s" % (self.command, self.path), flush=True)
        # SO_LINGER with a zero time-out: close() sends RST instead of FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        mode = outage_mode(self.path)
        if mode == "503":
            self.answer_error(503, "SlowDown", "Please reduce your request rate.")
            return
        if mode == "500-put" and self.command in ("PUT", "POST"):
            self.answer_error(500, "InternalError", "injected by fault_proxy.py")
            return
        if mode == "reset":
            self.reset()
            return
        if mode and mode.startswith("slow-"):
            print("injected slow %s %s" % (self.command, self.path), flush=True)
            time.sleep(float(mode[len("slow-"):]))
        injected = fault(self.command, self.path)
        if injected:
            self.answer_error(*injected)
            return
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
        headers = {k: v for k, v in self.headers.items()}
        conn.request(self.command, self.path, body=body if body or self.command in ("PUT", "POST") else None,
                     headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if mode == "head-no-length" and self.command == "HEAD" and resp.status == 200:
            print("injected head-no-length %s %s" % (self.command, self.path), flush=True)
            self.send_response(200)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.end_headers()
            self.close_connection = True
            return
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else resp.getheader(
            "Content-Length", "0")))
        self.end_headers()
        if self.command == "HEAD":
            return
        if mode == "short-body" and self.command == "GET" and 200 <= resp.status < 300 and len(data) > 1:
            print("injected short-body %s %s" % (self.command, self.path), flush=True)
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that gave up (time-out) or a reset we injected: nothing to report


server = Server(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
