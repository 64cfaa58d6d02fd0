#!/usr/bin/python3
"""Point-to-point through the torch backend "ringmaster", on 2 and 3 ranks,
over TCP and over shared memory. One case per run:

  p2p_test.py tags   Each rank sends tags 1 then 2 to the next rank, which
                     receives tag 2 first: each receive must get its own
                     tag's payload (issue 10, finding 24: it got the first
                     message sent). Small (eager) and 4 MiB (rendezvous)
                     messages; two messages with one tag arrive in the order
                     sent; a tagged message sent before an all_reduce is
                     received after it.
  p2p_test.py batch  batch_isend_irecv with the receives first in the list,
                     as torch's own example has it: every rank posts its
                     irecvs before its isends, so a pending receive must not
                     hold the sends back (finding 25: it deadlocked until
                     the timeout).

Each group has a 10 s timeout; a rank not done within 60 s fails the run.
Exit 0 when every rank of every configuration passes.
"""
import datetime
import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT_S = 10
SMALL, LARGE = 5, 1 << 20  # elements: an eager message, and one of 4 MiB


def payload(src, tag, n, salt=0):
    return torch.arange(n, dtype=torch.float32) + 1000.0 * src + 100.0 * tag + 10.0 * salt


def tags(rank, world, nxt, prv):
    for n in (SMALL, LARGE):
        sends = [dist.isend(payload(rank, tag, n), nxt, tag=tag) for tag in (1, 2)]
        got2, got1 = torch.zeros(n), torch.zeros(n)
        dist.recv(got2, prv, tag=2)
        dist.recv(got1, prv, tag=1)
        for s in sends:
            s.wait()
        assert torch.equal(got2, payload(prv, 2, n)), f"n={n}: recv tag 2 got {got2[:3].tolist()}"
        assert torch.equal(got1, payload(prv, 1, n)), f"n={n}: recv tag 1 got {got1[:3].tolist()}"

    # One tag twice: the first receive posted gets the first message sent,
    # whichever receive is waited on first.
    for n in (SMALL, LARGE):
        sends = [dist.isend(payload(rank, 7, n, salt), nxt, tag=7) for salt in (1, 2)]
        first, second = torch.zeros(n), torch.zeros(n)
        r1, r2 = dist.irecv(first, prv, tag=7), dist.irecv(second, prv, tag=7)
        r2.wait()
        r1.wait()
        for s in sends:
            s.wait()
        assert torch.equal(first, payload(prv, 7, n, 1)), f"n={n}: first tag-7 message {first[:3].tolist()}"
        assert torch.equal(second, payload(prv, 7, n, 2)), f"n={n}: second tag-7 message {second[:3].tolist()}"

    # Point to point and collectives do not block each other.
    s = dist.isend(payload(rank, 9, SMALL), nxt, tag=9)
    t = torch.ones(3)
    dist.all_reduce(t)
    got = torch.zeros(SMALL)
    dist.recv(got, prv, tag=9)
    s.wait()
    assert torch.equal(t, torch.full((3,), float(world))), f"all_reduce {t}"
    assert torch.equal(got, payload(prv, 9, SMALL)), f"tag 9 after all_reduce {got[:3].tolist()}"


def batch(rank, world, nxt, prv):
    for n in (SMALL, LARGE):
        from_prev, from_next = torch.zeros(n), torch.zeros(n)
        if world == 2:  # prev == next: one exchange
            ops = [dist.P2POp(dist.irecv, from_prev, prv), dist.P2POp(dist.isend, payload(rank, 0, n), nxt)]
        else:  # both directions around the ring, receives first
            ops = [dist.P2POp(dist.irecv, from_prev, prv), dist.P2POp(dist.irecv, from_next, nxt, tag=3),
                   dist.P2POp(dist.isend, payload(rank, 0, n), nxt), dist.P2POp(dist.isend, payload(rank, 3, n), prv, tag=3)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        assert torch.equal(from_prev, payload(prv, 0, n)), f"n={n}: batch recv from prev {from_prev[:3].tolist()}"
        if world > 2:
            assert torch.equal(from_next, payload(nxt, 3, n)), f"n={n}: batch recv from next {from_next[:3].tolist()}"


CASES = {"tags": tags, "batch": batch}


def rank_main(case, rank, world, transport, port, failures):
    where = f"{case}: {world} ranks over {transport}, rank {rank}"
    try:
        import ringmaster_torch  # noqa: F401
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RINGMASTER_TRANSPORT=transport)
        dist.init_process_group("ringmaster", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=TIMEOUT_S))
        CASES[case](rank, world, (rank + 1) % world, (rank + world - 1) % world)
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        failures.put(f"{where}: {traceback.format_exc()}")


def run(case, world, transport):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")  # the parent only imported torch: cheap, safe children
    failures = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(case, r, world, transport, port, failures)) for r in range(world)]
    for p in procs:
        p.start()
    bad = []
    for r, p in enumerate(procs):
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
            p.join()
            bad.append(f"{case}: {world} ranks over {transport}, rank {r}: still running after 60 s (a hang)")
    while not failures.empty():
        bad.append(failures.get())
    return bad


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: {sys.argv[0]} {'|'.join(CASES)}", file=sys.stderr)
        return 2
    case = sys.argv[1]
    bad = []
    for world in (2, 3):
        for transport in ("tcp", "shm"):
            bad += run(case, world, transport)
    if bad:
        print("FAIL:\n" + "\n".join(bad), file=sys.stderr)
        return 1
    print(f"ok: p2p {case} on 2 and 3 ranks over tcp and shm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
