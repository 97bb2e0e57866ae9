#!/usr/bin/env python3
"""Floods a running node and reports its RSS before, at the peak, right
after the flood's connections close, and after a quiet while: does the
memory a flood took come back? Driven by tests/bench/flood_memory.sh.

    flood_memory.py PID PROXY_PORT ADMIN_PORT [connections] [quiet_seconds]

Floods, one after the other:
  admin   connections to the admin listener that send nothing
  heads   proxy connections that send 8 KiB of a request head, never ending it
  bodies  proxy connections that each send a POST with a 64 KiB body
          (nginx answers a POST on its static file with 405) and never
          read the answer
"""
import socket
import sys
import time


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def connect_many(port, n, payload):
    held = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            if payload:
                s.sendall(payload)
            held.append(s)
        except OSError as error:
            print(f"  connect stopped at {len(held)}: {error}", file=sys.stderr)
            break
    return held


def flood(name, pid, port, n, payload, quiet):
    before = rss_mib(pid)
    held = connect_many(port, n, payload)
    time.sleep(2)
    peak = rss_mib(pid)
    for s in held:
        s.close()
    time.sleep(1)
    closed = rss_mib(pid)
    time.sleep(quiet)
    later = rss_mib(pid)
    print(
        f"| {name} | {len(held)} | {before:.1f} | {peak:.1f} | {closed:.1f} | {later:.1f} |",
        flush=True,
    )


def main():
    pid, proxy, admin = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 10000
    quiet = int(sys.argv[5]) if len(sys.argv) > 5 else 15
    print("| flood | connections | RSS before (MiB) | at the peak | just closed | after %d s |" % quiet)
    print("|---|---|---|---|---|---|")
    flood("admin, silent", pid, admin, n, b"", quiet)
    head = b"GET / HTTP/1.1\r\nHost: h\r\nX-Pad: " + b"a" * 8192
    flood("proxy, an unended 8 KiB head", pid, proxy, n, head, quiet)
    body = b"x" * 65536
    request = b"POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    flood("proxy, a 64 KiB request body, answer unread", pid, proxy, min(n, 2000), request, quiet)


if __name__ == "__main__":
    main()
