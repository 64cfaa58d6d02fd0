#!/usr/bin/python3
"""The torch.distributed backend "ringmaster" against expected values.

Starts 3 ranks (processes) on a FileStore-free env:// rendezvous and checks
every collective the backend offers, sync and async, then that a bad call
is refused with a clear error instead of hanging. Exit 0 when all ranks pass.
"""
import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 3


def check(rank, port, failures):
    try:
        import ringmaster_torch  # noqa: F401
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("ringmaster", rank=rank, world_size=WORLD)
        w = WORLD
        # all_reduce: every op, several dtypes, an odd count, a non-contiguous tensor
        for dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
            t = torch.full((1001,), rank + 1, dtype=dtype)
            dist.all_reduce(t)
            assert torch.all(t == sum(range(1, w + 1))), f"sum {dtype}: {t[:3]}"
        for op, want in ((dist.ReduceOp.MAX, w), (dist.ReduceOp.MIN, 1), (dist.ReduceOp.PRODUCT, 6)):
            t = torch.tensor([float(rank + 1)])
            dist.all_reduce(t, op=op)
            assert t.item() == want, f"{op}: {t}"
        m = torch.arange(12.0).reshape(3, 4).t()  # non-contiguous
        dist.all_reduce(m)
        assert torch.equal(m, torch.arange(12.0).reshape(3, 4).t() * w), "non-contiguous all_reduce"
        # async with a future
        t = torch.ones(5)
        fut = dist.all_reduce(t, async_op=True).get_future()
        assert torch.equal(fut.wait()[0], torch.full((5,), float(w))), "future"
        # broadcast from a non-zero root
        b = torch.arange(7.0) if rank == 2 else torch.zeros(7)
        dist.broadcast(b, src=2)
        assert torch.equal(b, torch.arange(7.0)), f"broadcast {b}"
        # reduce to root 1
        r = torch.full((4,), float(rank))
        dist.reduce(r, dst=1)
        if rank == 1:
            assert torch.equal(r, torch.full((4,), float(sum(range(w))))), f"reduce {r}"
        # all_gather
        outs = [torch.zeros(2, dtype=torch.int32) for _ in range(w)]
        dist.all_gather(outs, torch.tensor([rank, rank * 10], dtype=torch.int32))
        assert [o.tolist() for o in outs] == [[i, i * 10] for i in range(w)], f"all_gather {outs}"
        # reduce_scatter
        out = torch.zeros(3)
        dist.reduce_scatter(out, [torch.full((3,), float(i + rank)) for i in range(w)])
        assert torch.equal(out, torch.full((3,), float(w * rank + sum(range(w))))), f"reduce_scatter {out}"
        # send / recv around the ring
        if rank == 0:
            dist.send(torch.tensor([42.0]), dst=1)
        elif rank == 1:
            got = torch.zeros(1)
            dist.recv(got, src=0)
            assert got.item() == 42.0, f"recv {got}"
        dist.barrier()
        # complex tensors travel as float pairs (torch views them as real)
        c = torch.full((2,), complex(rank, 1), dtype=torch.complex64)
        dist.all_reduce(c)
        assert torch.all(c == complex(sum(range(w)), w)), f"complex {c}"
        # refused clearly: a dtype ringcomm does not reduce
        try:
            dist.all_reduce(torch.zeros(2, dtype=torch.int16))
            raise AssertionError("int16 all_reduce was accepted")
        except RuntimeError as e:
            assert "not supported" in str(e), str(e)
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        failures.put(f"rank {rank}: {traceback.format_exc()}")


def main():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    failures = ctx.Queue()
    procs = [ctx.Process(target=check, args=(r, port, failures)) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        if p.is_alive():
            p.kill()
            print("FAIL: a rank hung", file=sys.stderr)
            return 1
    bad = []
    while not failures.empty():
        bad.append(failures.get())
    if bad:
        print("FAIL:\n" + "\n".join(bad), file=sys.stderr)
        return 1
    print(f"ok: every collective of the ringmaster backend matches on {WORLD} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
