#!/usr/bin/env python3
"""A test program for lockcheck's exec driver that misbehaves on request.

    misbehave.py MODE [N]

It speaks the protocol (docs/exec-protocol.md) correctly, granting every
acquire (fence = the request's id, no real lock behind it), except that on the
N-th request after hello (default 3; each fresh process counts anew) it:

* crash:    exits with status 3 without replying;
* garbage:  prints a line that is not a reply;
* sleep:    never replies (sleeps for a minute);
* wrong-id: replies to another id;
* info:     replies info (error "lost-connection");

and with these modes it fails at hello instead:

* protocol: replies fail with the error "protocol" (another protocol version);
* no-hello: writes a line to stderr and exits with status 1.

Mode fine never misbehaves. Every process says on stderr when it starts and
what it does, so that lockcheck's reports have a tail to show.
"""

import json
import os
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "fine"
NTH = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def say(text):
    print(f"misbehave[{os.getpid()}]: {text}", file=sys.stderr, flush=True)


def reply(request, **fields):
    print(json.dumps({"id": request["id"], **fields}), flush=True)


def hello(request):
    if MODE == "protocol":
        say("speaking protocol 0")
        reply(request, type="fail", error="protocol")
    elif MODE == "no-hello":
        say("no hello today")
        sys.exit(1)
    else:
        reply(request, type="ok")


def misbehave(request):
    say(f"{MODE} on request {request['id']} ({request['op']})")
    if MODE == "crash":
        sys.exit(3)
    elif MODE == "garbage":
        print("this is not a reply", flush=True)
    elif MODE == "sleep":
        time.sleep(60)
    elif MODE == "wrong-id":
        reply({"id": request["id"] + 1000}, type="ok")
    elif MODE == "info":
        reply(request, type="info", error="lost-connection")


def main():
    client, clients = os.environ.get("LOCKCHECK_CLIENT"), os.environ.get("LOCKCHECK_CLIENTS")
    say(f"client {client} of {clients}, mode {MODE}")
    served = 0
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "hello":
            hello(request)
            continue
        served += 1
        if served == NTH and MODE != "fine":
            misbehave(request)
        elif request["op"] == "acquire":
            reply(request, type="ok", fence=request["id"], lease=f"{os.getpid()}:{request['id']}")
        elif request["op"] in ("release", "renew"):
            reply(request, type="ok")
        else:
            reply(request, type="fail", error="unsupported")


if __name__ == "__main__":
    main()
