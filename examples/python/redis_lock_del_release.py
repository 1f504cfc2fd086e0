#!/usr/bin/env python3
"""BROKEN on purpose: redis_lock.py with release by plain DEL.

DEL deletes the lock whoever holds it now. A holder that stalled past its TTL
wakes up, does its work and releases: it deletes the lock another client was
granted meanwhile, and a third client takes it while the second still holds
it. lockcheck finds this under the pause fault (mutual exclusion and
linearizability violated; docs/truth-table.md).
"""

import sys

sys.dont_write_bytecode = True  # no __pycache__ next to the examples

from redis_lock import Lock, lock_key, main  # noqa: E402


class DelReleaseLock(Lock):
    def release(self, request):
        self.server.delete(lock_key(request["key"]))
        return {"type": "ok"}


if __name__ == "__main__":
    main(DelReleaseLock)
