#!/usr/bin/python3
"""Submits from several clients at once, each with its own Idempotency-Key,
through the Python client's Transport (a leader and its standby: it follows
307s and passes dead servers). Prints one line per acknowledged submit,
"KEY ID", and a line "first-after STAMP" per client: when its first submit
after the file $STOP_FILE appeared was acknowledged (the failover's end).

usage: failover_submits.py SERVERS TOKEN CLIENTS PER_CLIENT > acks
"""
import os
import sys
import threading
import time

from ringmaster._http import Transport
from ringmaster.errors import RingmasterError

servers, token, clients, per = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
stop_file = os.environ.get("STOP_FILE", "")
spec = "name: load\ncommand: [\"true\"]\nresources: {cpu: 64}\n"  # never fits: stays pending
lock = threading.Lock()
errors = []


def client(c):
    t = Transport(servers, token, timeout=10.0, failover=30.0)
    after = None
    for i in range(per):
        key = f"c{c}-{i}"
        for attempt in range(3):  # a retry with the same key, as a user would
            try:
                got = t.call("POST", "/api/v1/jobs", body=spec.encode(), headers={"Idempotency-Key": key})
                with lock:
                    print(key, got["id"], flush=True)
                    if after is None and stop_file and os.path.exists(stop_file):
                        after = time.time()
                        print("first-after", f"{after:.3f}", flush=True)
                break
            except RingmasterError as e:
                if attempt == 2:
                    with lock:
                        errors.append(f"{key}: {e}")
        time.sleep(0.02)


threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
for th in threads:
    th.start()
for th in threads:
    th.join()
for e in errors:
    print("unacknowledged", e, file=sys.stderr)
