#!/usr/bin/env python3
"""BROKEN on purpose: redis_lock.py renewing by a plain PEXPIRE.

renew checks nothing: PEXPIRE extends the lock whoever holds it now. A holder
whose lease ran out while it stalled renews the next holder's lock and goes on
believing it holds it. Its acquire is two round trips as well (SET NX PX,
then INCR for the token), so a stall between them hands out the token late.
lockcheck finds both under the pause fault (linearizability violated;
docs/truth-table.md).
"""

import sys

sys.dont_write_bytecode = True  # no __pycache__ next to the examples

from redis_lock import Lock, fence_key, lock_key, main  # noqa: E402


class BlindRenewLock(Lock):
    def acquire(self, request):
        self.grants += 1
        value = f"{self.name}:{self.grants}"
        key = request["key"]
        if not self.server.set(lock_key(key), value, nx=True, px=request["ttl_ms"]):
            return {"type": "fail", "error": "busy"}
        fence = self.server.incr(fence_key(key))
        return {"type": "ok", "fence": fence, "lease": value}

    def renew(self, request):
        if self.server.pexpire(lock_key(request["key"]), request["ttl_ms"]):
            return {"type": "ok"}
        return {"type": "fail", "error": "not-held"}


if __name__ == "__main__":
    main(BlindRenewLock)
