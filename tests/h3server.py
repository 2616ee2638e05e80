#!/usr/bin/env python3
"""A small HTTP/3 server on aioquic, to check tests/h3client.py and
calvin-bench's h3 load by hand (it is not calvin's edge).

    h3server.py --cert PEM --key PEM [--listen 127.0.0.1:0] [--root DIR]

Prints {"listening": "ADDR:PORT"} once bound. Serves:

  GET  /bytes/N            N bytes (byte i is i % 251), sent as the
                           client's flow control takes them
  GET  /1k                 1,024 bytes of "x"
  POST /echo-sha256        reads the body; {"bytes": n, "sha256": hex}
  POST /upload             reads the body; "ok\\n"
  POST /early              413 at once, and STOP_SENDING on the body
  GET  /sse?n=N&delay_ms=D N server-sent events, one each D ms
  GET  /status/N           status N, a one-line body
  GET  /reset              resets the stream (H3_REQUEST_REJECTED)
  GET  /close              closes the connection (H3_EXCESSIVE_LOAD)
  GET  /NAME               with --root, the file DIR/NAME if there is one
                           (bench/run's origin files: /1k, /big, /part)
  anything else            404
"""

import argparse
import asyncio
import hashlib
import json
import os
import sys
from urllib.parse import parse_qs, urlsplit

from aioquic.asyncio import QuicConnectionProtocol, serve
from aioquic.h3.connection import H3_ALPN, ErrorCode, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration

PERIOD = 251
CHUNK = 64 * 1024
PATTERN = bytes(i % PERIOD for i in range(CHUNK + PERIOD))
SEND_AHEAD = 1 << 20


class Request:
    def __init__(self, headers):
        self.head = {k.decode(): v.decode() for k, v in headers}
        self.body = hashlib.sha256()
        self.body_bytes = 0
        self.ended = asyncio.Event()


class Server(QuicConnectionProtocol):
    # --root: the folder GET /NAME serves files from.
    root = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = None
        self.requests = {}
        self.progress = asyncio.Event()

    def quic_event_received(self, event):
        if self.h3 is None:
            self.h3 = H3Connection(self._quic)
        for h3_event in self.h3.handle_event(event):
            sid = h3_event.stream_id if hasattr(h3_event, "stream_id") else None
            if isinstance(h3_event, HeadersReceived) and sid not in self.requests:
                req = self.requests[sid] = Request(h3_event.headers)
                if h3_event.stream_ended:
                    req.ended.set()
                asyncio.ensure_future(self.answer(sid, req))
            elif isinstance(h3_event, DataReceived) and sid in self.requests:
                req = self.requests[sid]
                req.body.update(h3_event.data)
                req.body_bytes += len(h3_event.data)
                if h3_event.stream_ended:
                    req.ended.set()
        self.progress.set()

    def transmit(self):
        # Called after every datagram and timer: what an ACK let go out is
        # sent here, with no event of its own.
        super().transmit()
        self.progress.set()

    def respond(self, sid, status, body=b"", ctype="text/plain", end=True, extra=()):
        head = [(b":status", str(status).encode()), (b"content-type", ctype.encode())]
        if end:
            head.append((b"content-length", str(len(body)).encode()))
        head += list(extra)
        self.h3.send_headers(sid, head)
        self.h3.send_data(sid, body, end_stream=end)
        self.transmit()

    async def stream(self, sid, size, chunks):
        """A 200 of `size` bytes from `chunks`, each handed to aioquic only
        once most of the one before has gone out."""
        self.h3.send_headers(sid, [(b":status", b"200"),
                                   (b"content-type", b"application/octet-stream"),
                                   (b"content-length", str(size).encode())])
        sent = 0
        for chunk in chunks:
            sent += len(chunk)
            self.h3.send_data(sid, chunk, end_stream=sent == size)
            self.transmit()
            await self.drained(sid)
        if size == 0:
            self.h3.send_data(sid, b"", end_stream=True)
            self.transmit()

    async def drained(self, sid):
        sender = self._quic._streams[sid].sender
        while sender._buffer_stop - sender.highest_offset >= SEND_AHEAD:
            self.progress.clear()
            await self.progress.wait()

    async def answer(self, sid, req):
        url = urlsplit(req.head.get(":path", "/"))
        method, path = req.head.get(":method"), url.path
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if method == "POST" and path == "/early":
            self.respond(sid, 413, b"too large\n")
            self._quic.stop_stream(sid, ErrorCode.H3_NO_ERROR)
            self.transmit()
            return
        if method == "POST" and path in ("/echo-sha256", "/upload"):
            await req.ended.wait()
            if path == "/upload":
                return self.respond(sid, 200, b"ok\n")
            body = json.dumps({"bytes": req.body_bytes, "sha256": req.body.hexdigest()})
            return self.respond(sid, 200, body.encode(), "application/json")
        if path == "/1k":
            return self.respond(sid, 200, b"x" * 1024)
        if path.startswith("/bytes/") and path[7:].isdigit():
            size = int(path[7:])
            chunks = (PATTERN[o % PERIOD:o % PERIOD + min(CHUNK, size - o)]
                      for o in range(0, size, CHUNK))
            return await self.stream(sid, size, chunks)
        name = path.lstrip("/")
        if self.root and method == "GET" and name and "/" not in name and name != "..":
            file = os.path.join(self.root, name)
            if os.path.isfile(file):
                with open(file, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    return await self.stream(sid, size, iter(lambda: f.read(CHUNK), b""))
        if path == "/sse":
            n, delay = int(query.get("n", "5")), int(query.get("delay_ms", "100"))
            self.respond(sid, 200, ctype="text/event-stream", end=False)
            for i in range(n):
                await asyncio.sleep(delay / 1000)
                self.h3.send_data(sid, f"id: {i}\ndata: event {i}\n\n".encode(),
                                  end_stream=i == n - 1)
                self.transmit()
            return
        if path.startswith("/status/") and path[8:].isdigit():
            return self.respond(sid, int(path[8:]), f"status {path[8:]}\n".encode())
        if path == "/reset":
            self._quic.reset_stream(sid, ErrorCode.H3_REQUEST_REJECTED)
            self.transmit()
            return
        if path == "/close":
            self._quic.close(error_code=ErrorCode.H3_EXCESSIVE_LOAD, reason_phrase="go away")
            self.transmit()
            return
        self.respond(sid, 404, b"not found\n")


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--root", metavar="DIR", help="serve GET /NAME from DIR/NAME")
    args = p.parse_args()
    Server.root = args.root
    host, port = args.listen.rsplit(":", 1)
    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN,
                               max_data=64 << 20, max_stream_data=16 << 20)
    config.load_cert_chain(args.cert, args.key)
    server = await serve(host, int(port), configuration=config, create_protocol=Server)
    bound = server._transport.get_extra_info("sockname")
    print(json.dumps({"listening": f"{bound[0]}:{bound[1]}"}), flush=True)
    await asyncio.Future()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
