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
import os
import signal
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


def speed_up_sqs_queue_attributes() -> None:
    """Make moto's GetQueueAttributes compute the queue's attributes once.

    moto re-evaluates its attributes property up to three times per requested
    name, and each evaluation counts every message in the queue: asking a
    1,000-message queue for its depth took about 390 ms of CPU, and a test
    polling the depth starved the DynamoDB requests waiting on the same
    interpreter, so claims arrived seconds late. Computing the property once
    (about 50 ms) gives the same answer after the same validation.
    """
    try:
        from moto.sqs.exceptions import InvalidAttributeName
        from moto.sqs.models import SQSBackend
    except ImportError:
        return

    def get_queue_attributes(self, queue_name, attribute_names):
        queue = self.get_queue(queue_name)
        if not attribute_names:
            return {}
        valid_names = (
            ["All"]
            + queue.BASE_ATTRIBUTES
            + queue.FIFO_ATTRIBUTES
            + queue.KMS_ATTRIBUTES
        )
        for name in attribute_names:
            if name not in valid_names:
                raise InvalidAttributeName(name)
        attributes = queue.attributes
        if "All" in attribute_names:
            return attributes
        return {
            name: attributes[name]
            for name in attribute_names
            if attributes.get(name) is not None
        }

    if hasattr(SQSBackend, "get_queue_attributes"):
        SQSBackend.get_queue_attributes = get_queue_attributes


def fix_sqs_fifo_receive() -> None:
    """Make moto's ReceiveMessage keep a FIFO group locked through a long poll.

    moto notes which message groups have messages in flight once, when a
    receive starts. A long poll that started while a group was free could
    then hand out a later message of that group after another consumer had
    received an earlier one and put it back with a delay (a retry), and so
    break the group's order, which SQS never does. Two receives running at
    once could also both take a free group. This receive checks the groups
    in flight before every pass over the queue, under one lock per process,
    and counts only other receives' messages: one receive still returns
    several messages of a group, in order, as SQS does. While every visible
    message belongs to a locked group it waits 50 ms between passes instead
    of spinning. Standard queues keep moto's receive.
    """
    try:
        from copy import deepcopy

        from moto.core.utils import unix_time
        from moto.sqs.models import SQSBackend, _filter_message_attributes
    except ImportError:
        return
    if not hasattr(SQSBackend, "receive_message"):
        return
    original = SQSBackend.receive_message
    lock = threading.Lock()

    def receive_message(
        self,
        queue_name,
        count,
        wait_seconds_timeout,
        visibility_timeout,
        message_attribute_names=None,
    ):
        queue = self.get_queue(queue_name)
        if not queue.fifo_queue:
            return original(
                self,
                queue_name,
                count,
                wait_seconds_timeout,
                visibility_timeout,
                message_attribute_names,
            )
        if message_attribute_names is None:
            message_attribute_names = []
        result = []
        mine = set()
        polling_end = unix_time() + wait_seconds_timeout
        while True:
            blocked = False
            with lock:
                visible = queue.messages
                for message in visible:
                    if message in queue.pending_messages:
                        # In flight before, visible again: its consumer timed out.
                        queue.pending_messages.remove(message)
                locked = {
                    m.group_id
                    for m in queue.pending_messages
                    if m.group_id is not None and m not in mine
                }
                to_dlq = []
                for message in visible:
                    if message.group_id in locked:
                        blocked = True
                        continue
                    if (
                        queue.dead_letter_queue is not None
                        and queue.redrive_policy
                        and message.approximate_receive_count
                        >= queue.redrive_policy["maxReceiveCount"]
                    ):
                        to_dlq.append(message)
                        continue
                    if not self.is_message_valid_based_on_retention_period(
                        queue_name, message
                    ):
                        continue
                    queue.pending_messages.add(message)
                    mine.add(message)
                    message.mark_received(visibility_timeout=visibility_timeout)
                    copy = deepcopy(message)
                    _filter_message_attributes(copy, message_attribute_names)
                    result.append(copy)
                    if len(result) >= count:
                        break
                for message in to_dlq:
                    queue._messages.remove(message)
                    queue.dead_letter_queue.add_message(message)
            if result or not wait_seconds_timeout or unix_time() > polling_end:
                return result
            if blocked:
                threading.Event().wait(0.05)
            else:
                queue.wait_for_messages(1)

    SQSBackend.receive_message = receive_message


def sqs_dead_letter_source() -> None:
    """Give a message SQS moves to a dead-letter queue DeadLetterQueueSourceArn,
    and keep a queue's RedriveAllowPolicy, as SQS does.

    moto moves a message to the dead-letter queue after maxReceiveCount
    receives without saying from which queue, and neither stores nor
    returns RedriveAllowPolicy. SQS sets the system attribute
    DeadLetterQueueSourceArn (the source queue's ARN) on each message it
    dead-letters, which is how `worker redrive` tells the payments queue's
    messages from another queue's. A receive now marks the messages it is
    about to dead-letter with their queue's ARN, and returns the attribute
    when asked for it (by name or All).
    """
    try:
        from moto.sqs.models import Queue, SQSBackend
        from moto.sqs.responses import SQSResponse
    except ImportError:
        return
    if not hasattr(SQSBackend, "receive_message") or not hasattr(SQSResponse, "receive_message"):
        return
    name = "DeadLetterQueueSourceArn"
    backend_receive = SQSBackend.receive_message

    def receive_message(self, queue_name, *args, **kwargs):
        queue = self.get_queue(queue_name)
        if queue.dead_letter_queue is not None and queue.redrive_policy:
            for message in queue._messages:
                if message.approximate_receive_count >= queue.redrive_policy["maxReceiveCount"]:
                    message.system_attributes[name] = queue.queue_arn
        return backend_receive(self, queue_name, *args, **kwargs)

    SQSBackend.receive_message = receive_message
    response_receive = SQSResponse.receive_message

    def respond(self):
        out = response_receive(self)
        wanted = set(self._get_param("AttributeNames", []) or []) | set(
            self._get_param("MessageSystemAttributeNames", []) or []
        )
        msgs = getattr(out, "result", {}).get("Messages") if hasattr(out, "result") else None
        if not msgs or not wanted & {"All", name}:
            return out
        queue = self.sqs_backend.get_queue(self._get_queue_name())
        by_id = {m.id: m for m in queue._messages}
        for msg in msgs:
            m = by_id.get(msg["MessageId"])
            if m is not None and m.system_attributes.get(name):
                msg.setdefault("Attributes", {})[name] = m.system_attributes[name]
        return out

    SQSResponse.receive_message = respond

    if "RedriveAllowPolicy" not in Queue.BASE_ATTRIBUTES:
        Queue.BASE_ATTRIBUTES.append("RedriveAllowPolicy")
        Queue.redrive_allow_policy = None


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
    speed_up_sqs_queue_attributes()
    fix_sqs_fifo_receive()
    sqs_dead_letter_source()
    moto_app = DomainDispatcherApplication(create_backend_app)
    dynamo_lock = threading.Lock()

    def app(environ, start_response):
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
