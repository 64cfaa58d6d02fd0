#!/usr/bin/python3
"""Horovod's Gloo rendezvous server, as horovodrun starts it, without horovodrun.

  hvd_rendezvous.py HOST...     (one slot on each host; a host is its address)

Prints the port it listens on (all addresses of its network namespace), then
serves until it is killed. Each rank then needs HOROVOD_HOSTNAME=its host
(Gloo resolves it to the address it listens on),
HOROVOD_RANK=i, HOROVOD_SIZE=N, HOROVOD_LOCAL_RANK=0, HOROVOD_LOCAL_SIZE=1,
HOROVOD_CROSS_RANK=i, HOROVOD_CROSS_SIZE=N and the HOROVOD_GLOO_* variables.
"""
import sys
import time

from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
from horovod.runner.http.http_server import RendezvousServer


def main():
    hosts = sys.argv[1:]
    plan = get_host_assignments(parse_hosts(",".join(f"{h}:1" for h in hosts)), len(hosts))
    server = RendezvousServer()
    port = server.start()
    server.init(plan)
    print(port, flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
