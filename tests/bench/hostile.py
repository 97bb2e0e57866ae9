#!/usr/bin/env python3
"""A hostile round against one running node, every listener in turn, with
its bounds set to a few seconds (tests/bench/hostile.sh writes the
configuration): anything still open past its bound is unbounded. While each
attack holds, /healthz is asked on fresh connections and its p99 is kept.

    hostile.py PID PROXY TLS ADMIN GOSSIP [bound_seconds]

Prints a Markdown table: attack, what it held open at its height, what was
still open past the bound, /healthz p99 meanwhile, RSS.
"""
import multiprocessing
import os
import socket
import ssl
import sys
import time

from flood_memory import rss_mib


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def served(proxy):
    """A new client's request through the proxy: answered 200?"""
    try:
        with socket.create_connection(("127.0.0.1", proxy), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
            return answer.startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def healthz_p99(admin, proxy, stop, out):
    """Runs in a process of its own, so that the attack's own work (and
    Python's lock) never delays a sample. Between samples, a new client
    asks through the proxy; how many were not served is put out too. It
    runs at a real-time priority where it may (root): it shares a CPU
    with the attack, whose loop must not be what delays a sample."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (PermissionError, AttributeError):
        pass
    samples = []
    refused = 0
    while not stop.is_set():
        if not served(proxy):
            refused += 1
        started = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", admin), timeout=5) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                while s.recv(4096):
                    pass
            samples.append(time.perf_counter() - started)
        except OSError:
            samples.append(5.0)
        time.sleep(0.005)
    samples.sort()
    out.put((samples[int(0.99 * (len(samples) - 1))] if samples else float("nan"), len(samples), refused))


def still_open(conns):
    """Connections the node has not closed: a read that finds no end."""
    alive = 0
    for s in conns:
        try:
            s.setblocking(False)
            data = s.recv(65536)
            while data:
                data = s.recv(65536)
            # b"": closed by the node
        except (BlockingIOError, ssl.SSLWantReadError):
            alive += 1
        except OSError:
            pass
    return alive


def h2_frame(kind, flags, stream, payload):
    n = len(payload)
    return bytes([n >> 16 & 255, n >> 8 & 255, n & 255, kind, flags]) + stream.to_bytes(4, "big") + payload


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def attacks(proxy, tls, admin, gossip):
    def slowloris(n):
        conns = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", proxy))
            s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n")
            conns.append(s)
        return conns

    def tls_silent(n):
        return [socket.create_connection(("127.0.0.1", tls)) for _ in range(n)]

    def h2_zero_window(n):
        conns = []
        block = bytes([0x82, 0x86, 0x84, 0x41, 0x01]) + b"h"
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", proxy))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            out = PREFACE + h2_frame(4, 0, 0, bytes([0, 4, 0, 0, 0, 0]))
            for i in range(100):
                out += h2_frame(1, 5, 2 * i + 1, block)
            s.sendall(out)
            conns.append(s)
        return conns

    def h2_deaf_idle(n):
        conns = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", proxy))
            s.sendall(PREFACE + h2_frame(4, 0, 0, b""))
            conns.append(s)
        return conns

    def h1_unread(n):
        conns = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", proxy))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n")
            conns.append(s)
        return conns

    def admin_idle(n, per_second=None):
        conns = []
        started = time.perf_counter()
        for i in range(n):
            if per_second:
                wait = started + i / per_second - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            try:
                conns.append(socket.create_connection(("127.0.0.1", admin)))
            except OSError:
                break
        took = time.perf_counter() - started
        print(f"  (admin flood: {len(conns)} connections in {took:.1f} s)", file=sys.stderr)
        return conns

    def gossip_garbage(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for i in range(n):
            s.sendto(os.urandom(64 + i % 1200), ("127.0.0.1", gossip))
        s.close()
        return []

    return [
        ("plain: slowloris, a head never ended", slowloris, 500),
        ("TLS: connections that never say hello", tls_silent, 500),
        ("HTTP/2: 100 streams each under a zero window", h2_zero_window, 3),
        ("HTTP/2: idle, the closing PING ignored", h2_deaf_idle, 210),
        ("HTTP/1.1: a large answer never read", h1_unread, 20),
        ("admin: connections that send nothing, 2,000 a second", lambda n: admin_idle(n, 2000), 15000),
        ("admin: connections that send nothing, as fast as they open", admin_idle, 15000),
        ("gossip: datagrams of garbage", gossip_garbage, 20000),
    ]


def main():
    pid = int(sys.argv[1])
    proxy, tls, admin, gossip = (int(a) for a in sys.argv[2:6])
    bound = float(sys.argv[6]) if len(sys.argv) > 6 else 3
    print("| attack | n | fds at its height | still open past the bound | /healthz p99 meanwhile | new clients served meanwhile | RSS at its height (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for name, attack, n in attacks(proxy, tls, admin, gossip):
        stop, p99 = multiprocessing.Event(), multiprocessing.Queue()
        watcher = multiprocessing.Process(target=healthz_p99, args=(admin, proxy, stop, p99))
        watcher.start()
        conns = attack(n)
        time.sleep(0.5)
        fds, rss = open_fds(pid), rss_mib(pid)
        time.sleep(bound * 2 + 3)
        alive = still_open(conns)
        stop.set()
        p99, asked, refused = p99.get()
        watcher.join()
        for s in conns:
            s.close()
        print(
            f"| {name} | {n} | {fds} | {alive} | {p99 * 1000:.2f} ms | {asked - refused} of {asked} | {rss:.1f} |",
            flush=True,
        )
        time.sleep(1)


if __name__ == "__main__":
    main()
