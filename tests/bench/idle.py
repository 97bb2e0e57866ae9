"""Opens N client connections to a proxy, sends one request on each, reads
its answer, and holds every connection open and idle until stdin closes.
Prints "ready <n>" once all N have been answered.

    python3 idle.py HOST PORT N [http1|h2c]

HTTP/2 (prior knowledge): the preface, SETTINGS, one GET on stream 1; the
answer is read to its END_STREAM.
"""
import asyncio
import struct
import sys

HOST, PORT, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
MODE = sys.argv[4] if len(sys.argv) > 4 else "http1"


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def h2_request(authority):
    # HPACK: :method GET (2), :scheme http (6), :path / (4), then
    # :authority as a literal without indexing, name indexed (1).
    value = authority.encode()
    block = bytes([0x82, 0x86, 0x84, 0x01, len(value)]) + value
    return (
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
        + frame(4, 0, 0)
        + frame(1, 0x5, 1, block)  # HEADERS, END_STREAM | END_HEADERS
    )


async def http1(reader, writer):
    writer.write(f"GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await reader.readexactly(length)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.split(b"\r\n", 1)[0])


async def h2c(reader, writer):
    writer.write(h2_request(f"{HOST}:{PORT}"))
    await writer.drain()
    while True:
        header = await reader.readexactly(9)
        length = int.from_bytes(header[:3], "big")
        kind, flags = header[3], header[4]
        stream = int.from_bytes(header[5:9], "big") & 0x7FFFFFFF
        await reader.readexactly(length)
        if kind == 4 and not flags & 1:
            writer.write(frame(4, 1, 0))  # SETTINGS ack
        if stream == 1 and kind in (0, 1) and flags & 1:
            return


async def one(held):
    reader, writer = await asyncio.open_connection(HOST, PORT)
    await (h2c if MODE == "h2c" else http1)(reader, writer)
    held.append(writer)


async def main():
    held = []
    batch = 200
    for start in range(0, N, batch):
        await asyncio.gather(*(one(held) for _ in range(min(batch, N - start))))
    print(f"ready {len(held)}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


asyncio.run(main())
