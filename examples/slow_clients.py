#!/usr/bin/env python3
"""Slow clients against `tagpin run`'s HTTP port, and what they cost it in memory.

Opens N connections to the webhook port without knowing the secret and holds them, then
prints the controller's resident memory (VmRSS from /proc) before, while they are held, and
after they are gone. A measurement, not a test: figures depend on the machine.

Modes:
  body    POST /webhooks/ghcr with a made-up signature and a 1 MiB body sent but for its last
          byte (a signed delivery must be read before it can be checked)
  bearer  the same to /webhooks/harbor with a wrong bearer token (refused before the body)
  header  a request line and one header, never finished

Usage:
  python3 examples/slow_clients.py --pid PID --addr 127.0.0.1:8080 [--mode body] [-n 200]
"""

import argparse
import socket
import sys
import time

BODY = 1024 * 1024


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmRSS for pid {pid}")


def open_slow(addr, mode):
    host, port = addr.rsplit(":", 1)
    # Non-blocking: past the server's connection limit and its listen backlog, a connect
    # waits for the server (SYN retries) and must not stop the others.
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.connect_ex((host, int(port)))
    if mode == "header":
        head = b"POST /webhooks/distribution HTTP/1.1\r\nHost: tagpin\r\n"
        body = b""
    else:
        path, auth = {
            "body": ("/webhooks/ghcr", "X-Hub-Signature-256: sha256=" + "0" * 64),
            "bearer": ("/webhooks/harbor", "Authorization: Bearer not-the-secret"),
        }[mode]
        head = (
            f"POST {path} HTTP/1.1\r\nHost: tagpin\r\n{auth}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {BODY}\r\n\r\n"
        ).encode()
        body = b"{" + b" " * (BODY - 2)  # all but the last byte
    return s, head + body


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--mode", choices=["body", "bearer", "header"], default="body")
    parser.add_argument("-n", type=int, default=200)
    parser.add_argument("--hold", type=float, default=8.0, help="seconds to hold them")
    args = parser.parse_args()

    before = rss_kib(args.pid)
    pending = [open_slow(args.addr, args.mode) for _ in range(args.n)]
    conns = [s for s, _ in pending]
    # Push what each may send, without blocking on the ones the server does not read.
    deadline = time.time() + args.hold
    peak = before
    while time.time() < deadline:
        progressed = False
        for i, (s, data) in enumerate(pending):
            if not data:
                continue
            try:
                sent = s.send(data[:65536])
                pending[i] = (s, data[sent:])
                progressed = progressed or sent > 0
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                pending[i] = (s, b"")  # refused or closed by the server
        peak = max(peak, rss_kib(args.pid))
        if not progressed:
            time.sleep(0.05)
    held = rss_kib(args.pid)
    for s in conns:
        s.close()
    time.sleep(1.0)
    after = rss_kib(args.pid)
    print(
        f"mode={args.mode} n={args.n}: RSS before {before / 1024:.1f} MiB, "
        f"peak {peak / 1024:.1f} MiB, held {held / 1024:.1f} MiB after {args.hold:.0f} s, "
        f"{after / 1024:.1f} MiB once closed"
    )


if __name__ == "__main__":
    sys.exit(main())
