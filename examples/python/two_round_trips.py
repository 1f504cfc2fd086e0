#!/usr/bin/env python3
"""A test program for lockcheck's exec driver: every operation is two round
trips to Redis, and it writes down how far apart Redis saw them.

    two_round_trips.py LOG

It speaks the protocol (docs/exec-protocol.md) with no real lock behind it:
every acquire is granted (fence = the request's id), every renew and release
succeeds. Each operation asks Redis for its TIME twice, one command after the
other, and appends a line `OP GAP_MS` to LOG: the gap between the two as
Redis's own clock saw it. A pause at the between-commands point holds the
second command from the moment the first reply arrives, so the gap of the
operation it struck is the stall's length; every other gap is a round trip.
"""

import json
import os
import sys

import redis

PROTOCOL = 1


def now_us(server):
    seconds, micros = server.time()
    return seconds * 1_000_000 + micros


def main():
    log = open(sys.argv[1], "a", buffering=1)
    deadline_ms = int(os.environ.get("LOCKCHECK_DEADLINE_MS", "1000"))
    seconds = max(deadline_ms / 4, 10) / 1000
    server = redis.Redis.from_url(
        os.environ["LOCKCHECK_REDIS_URL"], socket_timeout=seconds, socket_connect_timeout=seconds
    )
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        reply = {"id": request["id"], "type": "ok"}
        if op == "hello":
            if request.get("protocol") != PROTOCOL:
                reply = {"id": request["id"], "type": "fail", "error": "protocol"}
        else:
            try:
                first = now_us(server)
                second = now_us(server)
                log.write(f"{op} {(second - first) / 1000:.1f}\n")
                if op == "acquire":
                    reply["fence"] = request["id"]
                    reply["lease"] = str(request["id"])
            except redis.exceptions.RedisError as error:
                reply = {"id": request["id"], "type": "info", "error": type(error).__name__}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
