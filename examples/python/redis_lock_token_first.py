#!/usr/bin/env python3
"""BROKEN on purpose: redis_lock.py taking its fencing token before its grant.

acquire is two commands, two round trips: INCR fence:<key> for the token,
then SET lock:<key> NX PX. A process that stalls between the two (a GC pause
after the INCR's reply) takes the lock after it wakes with a token older
than the ones handed out while it slept: a later holder can carry a smaller
token than an earlier one, and the tokens no longer order the holders.
lockcheck finds it under the pause fault at the between-commands point,
where it holds the program's connections after the first reply of an
operation until the stall is over and the lock looks free (linearizability
violated; docs/exec-protocol.md).
"""

import sys

sys.dont_write_bytecode = True  # no __pycache__ next to the examples

from redis_lock import Lock, fence_key, lock_key, main  # noqa: E402


class TokenFirstLock(Lock):
    def acquire(self, request):
        self.grants += 1
        value = f"{self.name}:{self.grants}"
        key = request["key"]
        fence = self.server.incr(fence_key(key))
        if not self.server.set(lock_key(key), value, nx=True, px=request["ttl_ms"]):
            return {"type": "fail", "error": "busy"}
        return {"type": "ok", "fence": fence, "lease": value}


if __name__ == "__main__":
    main(TokenFirstLock)
