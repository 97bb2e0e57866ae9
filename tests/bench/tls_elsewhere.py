#!/usr/bin/env python3
"""Resumption on another node: connections that alternate between two
nodes of one proxy, each offering the session the other node gave on the
previous connection, as a client behind a load balancer does. One
handshake and one request per connection. Run by tests/bench/tls.sh.

    tls_elsewhere.py PORT_A PORT_B SECONDS CA_FILE SERVER_NAME

Prints "connections resumed": how many connections were made, and how
many of them resumed their session.
"""

import socket
import ssl
import sys
import time


def main():
    port_a, port_b = int(sys.argv[1]), int(sys.argv[2])
    seconds = float(sys.argv[3])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(sys.argv[4])
    name = sys.argv[5]
    request = f"GET / HTTP/1.1\r\nhost: {name}\r\nconnection: close\r\n\r\n".encode()
    session, made, resumed = None, 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        port = (port_a, port_b)[made % 2]
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with context.wrap_socket(raw, server_hostname=name, session=session) as tls:
                tls.sendall(request)
                answer = b""
                try:
                    while chunk := tls.recv(65536):
                        answer += chunk
                except (ssl.SSLEOFError, ConnectionResetError):
                    pass
                if not answer.startswith(b"HTTP/1.1 200"):
                    sys.exit(f"bench: port {port} answered {answer[:40]!r}")
                resumed += tls.session_reused
                # The session as it is now: with TLS 1.3, the tickets came
                # after the handshake, with the answer.
                session = tls.session
        made += 1
    print(made, resumed)


if __name__ == "__main__":
    main()
