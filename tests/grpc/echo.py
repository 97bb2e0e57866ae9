"""A gRPC server and client for Picket's tests, on grpcio (no generated code:
messages are raw bytes).

    echo.py serve --port P --name N [--not-serving] [--unavailable]
    echo.py calls --target HOST:PORT < calls.json     (prints results as JSON)

The server's service `picket.test.Echo` has one method of each kind:
- `Unary`: answers `<name>:<request>`; a request `status:CODE` fails with
  that code (and trailing metadata `x-fail: CODE`); `sleep:MS` answers
  after MS milliseconds.
- `Server`: a request `N` gets N answers `<name>:<i>`; `N:MS`, MS
  milliseconds apart.
- `Client`: answers `<name>:` and every request joined with `+`.
- `Bidi`: answers each request as it comes, `<name>:<request>`.
Every answer carries trailing metadata `x-served-by: <name>` and a binary
`x-checksum-bin` of what it sent. The standard health service says SERVING
(or NOT_SERVING with `--not-serving`); `Unary` with `health:NOT_SERVING` or
`health:SERVING` changes it. With `--unavailable` every call of `Echo`
fails at once with UNAVAILABLE, trailers only.
"""

import argparse
import hashlib
import json
import sys
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

SERVICE = "picket.test.Echo"


def identity(x):
    return x


def serve(args):
    name = args.name.encode()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    checker = health.HealthServicer()
    status = (
        health_pb2.HealthCheckResponse.NOT_SERVING
        if args.not_serving
        else health_pb2.HealthCheckResponse.SERVING
    )
    checker.set("", status)
    checker.set(SERVICE, status)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)

    def trailers(context, sent):
        context.set_trailing_metadata(
            (
                ("x-served-by", args.name),
                ("x-checksum-bin", hashlib.sha256(sent).digest()),
            )
        )

    def unary(request, context):
        refuse(context)
        if request.startswith(b"status:"):
            code = int(request[7:])
            context.set_trailing_metadata((("x-fail", str(code)),))
            context.abort(grpc.StatusCode([c for c in grpc.StatusCode if c.value[0] == code][0]), "asked to fail")
        if request.startswith(b"sleep:"):
            time.sleep(int(request[6:]) / 1000)
        if request.startswith(b"health:"):
            value = request[7:].decode()
            new = getattr(health_pb2.HealthCheckResponse, value)
            checker.set("", new)
            checker.set(SERVICE, new)
        answer = name + b":" + request
        trailers(context, answer)
        return answer

    def refuse(context):
        if args.unavailable:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"{args.name} is unavailable")

    def server_stream(request, context):
        refuse(context)
        sent = b""
        count, _, pause = request.partition(b":")
        for i in range(int(count)):
            if i and pause:
                time.sleep(int(pause) / 1000)
            answer = name + b":" + str(i).encode()
            sent += answer
            yield answer
        trailers(context, sent)

    def client_stream(requests, context):
        refuse(context)
        answer = name + b":" + b"+".join(requests)
        trailers(context, answer)
        return answer

    def bidi(requests, context):
        refuse(context)
        sent = b""
        for request in requests:
            answer = name + b":" + request
            sent += answer
            yield answer
        trailers(context, sent)

    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, identity, identity),
        "Server": grpc.unary_stream_rpc_method_handler(server_stream, identity, identity),
        "Client": grpc.stream_unary_rpc_method_handler(client_stream, identity, identity),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi, identity, identity),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    print("serving", flush=True)
    server.wait_for_termination()


def metadata(pairs):
    out = {}
    for key, value in pairs or ():
        out[key] = value.hex() if isinstance(value, bytes) else value
    return out


def call(channel, spec):
    kind = spec["kind"]
    timeout = spec.get("timeout")
    path = f"/{SERVICE}/{kind}"
    result = {"kind": kind, "seconds": 0.0}
    started = time.monotonic()
    try:
        if kind == "Unary":
            stub = channel.unary_unary(path, identity, identity)
            answer, state = stub.with_call(spec["request"].encode(), timeout=timeout)
            result["answers"] = [answer.decode()]
        elif kind == "Server":
            stub = channel.unary_stream(path, identity, identity)
            state = stub(spec["request"].encode(), timeout=timeout)
            result["answers"] = [a.decode() for a in state]
        elif kind == "Client":
            stub = channel.stream_unary(path, identity, identity)
            answer, state = stub.with_call(iter([r.encode() for r in spec["requests"]]), timeout=timeout)
            result["answers"] = [answer.decode()]
        elif kind == "Bidi":
            # Each request is sent only once the answer to the one before
            # has come back (and `pause_ms` after it): a proxy that waits
            # for the end of the requests before answering deadlocks.
            stub = channel.stream_stream(path, identity, identity)
            import queue

            outbox = queue.Queue()
            requests = [r.encode() for r in spec["requests"]]
            outbox.put(requests[0])

            def gen():
                while True:
                    item = outbox.get()
                    if item is None:
                        return
                    yield item

            state = stub(gen(), timeout=timeout)
            answers = []
            for answer in state:
                answers.append(answer.decode())
                time.sleep(spec.get("pause_ms", 0) / 1000)
                if len(answers) < len(requests):
                    outbox.put(requests[len(answers)])
                else:
                    outbox.put(None)
            result["answers"] = answers
        else:
            raise ValueError(kind)
        result["code"] = state.code().value[0]
        result["details"] = state.details()
        result["trailing"] = metadata(state.trailing_metadata())
        # The server's digest of what it sent, against what came.
        received = b"".join(a.encode() for a in result["answers"])
        result["intact"] = result["trailing"].get("x-checksum-bin") == hashlib.sha256(received).hexdigest()
    except grpc.RpcError as error:
        result["code"] = error.code().value[0]
        result["details"] = error.details()
        result["trailing"] = metadata(error.trailing_metadata())
    result["seconds"] = time.monotonic() - started
    return result


def calls(args):
    specs = json.load(sys.stdin)
    options = [("grpc.enable_retries", 0)]
    with grpc.insecure_channel(args.target, options=options) as channel:
        results = [call(channel, spec) for spec in specs]
    json.dump(results, sys.stdout)
    print(flush=True)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--not-serving", action="store_true")
    s.add_argument("--unavailable", action="store_true")
    c = sub.add_parser("calls")
    c.add_argument("--target", required=True)
    args = parser.parse_args()
    {"serve": serve, "calls": calls}[args.command](args)


if __name__ == "__main__":
    main()
