#!/usr/bin/env python3
"""A Redis lock for lockcheck's exec driver (docs/exec-protocol.md, version 1).

The Redis recipe of docs/guide.md#redis, with the fencing token taken atomically:

* acquire: one Lua script does SET lock:<key> <value> NX PX <ttl> and, if that
  took the lock, INCR fence:<key>; the new count is the fencing token;
* release: Lua compare-and-delete (only our own value is deleted);
* renew: Lua compare-then-PEXPIRE (only our own lock is extended).

The value is unique per grant (client, random nonce, counter) and is the lease
lockcheck sends back with renew and release. Redis is LOCKCHECK_REDIS_URL; key
names start with LOCKCHECK_KEY_PREFIX (empty by default). A Redis timeout or a
lost connection leaves the outcome unknown: the reply is info, and lockcheck
goes on with a fresh process.

Run it under lockcheck (Debian: apt-get install python3-redis):

    lockcheck check --backend exec --servers redis -- python3 examples/python/redis_lock.py
"""

import json
import os
import secrets
import sys

import redis

PROTOCOL = 1
PREFIX = os.environ.get("LOCKCHECK_KEY_PREFIX", "")

ACQUIRE = """
if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
  return redis.call("incr", KEYS[2])
end
return 0
"""
RELEASE = """
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end
return 0
"""
RENEW = """
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end
return 0
"""


def lock_key(key):
    return f"{PREFIX}lock:{key}"


def fence_key(key):
    return f"{PREFIX}fence:{key}"


class Lock:
    """The lock recipe: one method per request of the protocol."""

    def __init__(self, server):
        self.server = server
        self.acquire_script = server.register_script(ACQUIRE)
        self.release_script = server.register_script(RELEASE)
        self.renew_script = server.register_script(RENEW)
        self.name = f"client-{os.environ.get('LOCKCHECK_CLIENT', '?')}:{secrets.token_hex(8)}"
        self.grants = 0

    def acquire(self, request):
        self.grants += 1
        value = f"{self.name}:{self.grants}"
        key = request["key"]
        keys = [lock_key(key), fence_key(key)]
        fence = self.acquire_script(keys=keys, args=[value, request["ttl_ms"]])
        if fence == 0:
            return {"type": "fail", "error": "busy"}
        return {"type": "ok", "fence": fence, "lease": value}

    def release(self, request):
        args = [request.get("lease", "")]
        deleted = self.release_script(keys=[lock_key(request["key"])], args=args)
        return ok_or_not_held(deleted)

    def renew(self, request):
        args = [request.get("lease", ""), request["ttl_ms"]]
        renewed = self.renew_script(keys=[lock_key(request["key"])], args=args)
        return ok_or_not_held(renewed)


def ok_or_not_held(count):
    return {"type": "ok"} if count == 1 else {"type": "fail", "error": "not-held"}


def handle(lock, request):
    """The reply to one request (without its id)."""
    op = request.get("op")
    if op == "hello":
        if request.get("protocol") != PROTOCOL:
            return {"type": "fail", "error": "protocol"}
        return {"type": "ok"}
    if op not in ("acquire", "release", "renew"):
        return {"type": "fail", "error": "unsupported"}
    try:
        return getattr(lock, op)(request)
    except redis.exceptions.TimeoutError as error:
        # Sent or not, answered or not: nobody knows whether it took effect.
        print(f"{op} {request.get('key')}: {error!r}", file=sys.stderr, flush=True)
        return {"type": "info", "error": "timeout"}
    except redis.exceptions.ConnectionError as error:
        print(f"{op} {request.get('key')}: {error!r}", file=sys.stderr, flush=True)
        return {"type": "info", "error": "conn-lost"}
    except redis.exceptions.ResponseError as error:
        # Redis answered with an error: it did not take effect.
        return {"type": "fail", "error": f"redis-error:{error}"}


def main(lock_class=Lock):
    # Socket timeouts well inside lockcheck's deadline, so that a slow Redis
    # is our own info reply rather than lockcheck's timeout (a quarter: a
    # request may wait for a connection, then for its reply).
    deadline_ms = int(os.environ.get("LOCKCHECK_DEADLINE_MS", "1000"))
    seconds = max(deadline_ms / 4, 10) / 1000
    server = redis.Redis.from_url(
        os.environ["LOCKCHECK_REDIS_URL"], socket_timeout=seconds, socket_connect_timeout=seconds
    )
    lock = lock_class(server)
    for line in sys.stdin:
        request = json.loads(line)
        reply = {"id": request["id"], **handle(lock, request)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
