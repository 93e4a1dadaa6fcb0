#!/usr/bin/env python3
"""Serve moto (SQS and DynamoDB on one port) for local development and tests.

moto checks a DynamoDB ConditionExpression and writes the item in two unlocked
steps, so two conditional writes on one key can both succeed under threaded
load. Real DynamoDB is atomic per item. This wrapper serializes DynamoDB
requests behind one lock and leaves everything else (SQS long polls) concurrent.

Usage: serve.py [--host 127.0.0.1] [--port 0] [--port-file FILE]
Port 0 picks a free port; the chosen port is printed and written to FILE.
"""
import argparse
import io
import os
import signal
import socket
import sys
import threading


def speed_up_sqs_receive() -> None:
    """Make moto's ReceiveMessage cost O(batch) instead of O(batch x queue).

    moto checks each received message's retention by computing all the
    queue's attributes, which counts every message in the queue: a receive
    from a backlog of 1,000 took about 2 s. Reading the one attribute it needs
    gives the same answer in microseconds, so backlogs and benchmarks measure
    the worker rather than the emulator.
    """
    try:
        from moto.core.utils import unix_time
        from moto.sqs.models import SQSBackend
    except ImportError:
        return

    def is_message_valid_based_on_retention_period(self, queue_name, message):
        queue = self.get_queue(queue_name)
        retention = int(queue.message_retention_period)
        return retention + message.sent_timestamp / 1000 > unix_time()

    if hasattr(SQSBackend, "is_message_valid_based_on_retention_period"):
        SQSBackend.is_message_valid_based_on_retention_period = (
            is_message_valid_based_on_retention_period
        )


def read_body(environ) -> None:
    """Read the request body before the app runs, so none is left unread."""
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):
        body = stream.read()
    else:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = stream.read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)


def keep_connections_alive() -> None:
    """Let clients reuse connections, as they do with AWS.

    werkzeug answers every request with "Connection: close" and then drains
    the socket, because a WSGI app may leave a body unread. Here read_body()
    always reads it, so the drain is skipped and the header dropped; without
    this every SDK request paid a TCP connect and close, which made up most
    of a worker's CPU per message in the benchmark.
    """
    import werkzeug.serving as serving

    class NoDrainSelector:
        def register(self, *args, **kwargs):
            pass

        def select(self, timeout=None):
            return []

        def close(self):
            pass

    class Selectors:
        DefaultSelector = NoDrainSelector
        EVENT_READ = 1

    serving.selectors = Selectors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", default="")
    args = parser.parse_args()

    try:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            create_backend_app,
        )
        from werkzeug.serving import WSGIRequestHandler, make_server
    except ImportError as err:
        print(
            f"emulator: moto is not installed ({err}); install it with: "
            "pip install 'moto[server]'",
            file=sys.stderr,
        )
        return 3

    speed_up_sqs_receive()
    keep_connections_alive()
    moto_app = DomainDispatcherApplication(create_backend_app)
    dynamo_lock = threading.Lock()

    def app(environ, start_response):
        read_body(environ)
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            with dynamo_lock:
                # Materialize the body inside the lock: the write happens
                # while the response is produced.
                body = list(moto_app(environ, start_response))
            return body
        return moto_app(environ, start_response)

    class QuietHandler(WSGIRequestHandler):
        def log_request(self, *a, **kw):  # one line per request drowns test output
            pass

        def setup(self):
            super().setup()
            # Headers and body go out in separate writes: without NODELAY a
            # kept-alive connection waits for the client's delayed ACK.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def send_header(self, keyword, value):
            if keyword.lower() == "connection" and value.lower() == "close":
                return  # keep-alive: see keep_connections_alive
            super().send_header(keyword, value)


    server = make_server(
        args.host, args.port, app, threaded=True, request_handler=QuietHandler
    )
    port = server.socket.getsockname()[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    print(f"emulator: serving SQS and DynamoDB on http://{args.host}:{port}", flush=True)

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
