#!/usr/bin/env python3
"""tests/s3/fault_proxy.py — a tiny fault-injecting HTTP proxy in front of an S3 endpoint.

    fault_proxy.py UPSTREAM_URL RULE PORT_FILE

Listens on a free port of 127.0.0.1 (written to PORT_FILE once it listens) and forwards
every request unchanged (the Host header too, so SigV4 signatures stay valid) to
UPSTREAM_URL, except the ones RULE picks, which it answers itself:
    slowdown-every-N     every N-th PUT: 503 SlowDown (an S3 error body, like AWS)
    forbid-put-MATCH     every PUT whose path contains MATCH: 403 AccessDenied
Each injected fault is one line on stdout ("injected 503 PUT /bucket/key"), flushed.
"""
import http.client
import http.server
import sys
import threading
import urllib.parse

upstream = urllib.parse.urlparse(sys.argv[1])
rule = sys.argv[2]
port_file = sys.argv[3]
lock = threading.Lock()
puts = 0


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

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        injected = fault(self.command, self.path)
        if injected:
            status, code, message = injected
            payload = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code><Message>%s</Message>"
                       "</Error>" % (code, message)).encode()
            print("injected %d %s %s" % (status, self.command, self.path), flush=True)
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
        headers = {k: v for k, v in self.headers.items()}
        conn.request(self.command, self.path, body=body if body or self.command in ("PUT", "POST") else None,
                     headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else resp.getheader(
            "Content-Length", "0")))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
