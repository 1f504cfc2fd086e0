#!/usr/bin/env python3
"""BROKEN on purpose: redis_lock.py renewing by a plain PEXPIRE.

renew checks nothing: PEXPIRE extends the lock whoever holds it now. A holder
whose lease ran out while it stalled renews the next holder's lock and goes on
believing it holds it. lockcheck finds it under the pause fault: a stall
before a renewal outlasts the lease and ends once another client holds the
lock (linearizability violated; docs/exec-protocol.md).
"""

import sys

sys.dont_write_bytecode = True  # no __pycache__ next to the examples

from redis_lock import Lock, lock_key, main  # noqa: E402


class BlindRenewLock(Lock):
    def renew(self, request):
        if self.server.pexpire(lock_key(request["key"]), request["ttl_ms"]):
            return {"type": "ok"}
        return {"type": "fail", "error": "not-held"}


if __name__ == "__main__":
    main(BlindRenewLock)
