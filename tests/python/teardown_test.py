#!/usr/bin/python3
"""A rank tears down in the middle of a collective (issue 10, finding 26).

20 runs of the torch backend "ringmaster", with a 3 s group timeout, on 2
or 3 ranks over TCP or shared memory. Every rank forms the group and runs
one all_reduce; then one rank (the leaver) goes while a 16 MiB all_reduce is
under way, in one of four ways:

  early    it calls destroy_process_group() while the others are inside
           the all_reduce it never joined
  destroy  it starts the all_reduce (async_op=True), drops the tensor and
           the work, and calls destroy_process_group() at once; the others
           join 0.2 s later, so the collective is in flight when the group
           is destroyed. The others then run a second all_reduce without it
  crash    it starts the all_reduce and exits (os._exit) in the middle of it
  quit     as destroy, but it just returns without destroy_process_group():
           the interpreter's own shutdown tears the group down

The leaver is sometimes rank 0, which serves the rendezvous store (torch's
TCPStore), so the survivors lose their store too. Each run requires that
every rank's process ends within the timeout plus 2 s of the leaver going,
that every survivor's failed all_reduce names the leaver as Describe() does
("rank 1 (host vm, pid 812)"), and that every survivor returns from
destroy_process_group. The old backend hung in destroy (its worker needed
the GIL the destructor held) and at interpreter shutdown.
"""
import ast
import datetime
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RUNS = 20
TIMEOUT_S = 3.0
SLACK_S = 2.0
BIG = 1 << 22  # elements: a 16 MiB all_reduce
HOW = ("early", "destroy", "crash", "quit")


def scenario(i):
    """Run i: (world, leaver, how, transport). Every way of leaving runs over both transports, with
    rank 0 (which serves the store) or another rank leaving; 3-rank runs keep rank 0 alive."""
    how = HOW[i % 4]
    transport = "tcp" if (i // 4) % 2 == 0 else "shm"
    world = 3 if i % 5 == 4 else 2
    leaver = 1 + (i // 8) % 2 if world == 3 else (i // 8) % 2
    return world, leaver, how, transport


def report(events, *event):
    if events is None:  # a subprocess: one line on stdout
        print(repr(event), flush=True)
    else:
        events.put(event)


def rank_main(world, rank, leaver, how, transport, port, events):
    try:
        import ringmaster_torch  # noqa: F401
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RINGMASTER_TRANSPORT=transport)
        torch.set_num_threads(1)
        dist.init_process_group("ringmaster", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=TIMEOUT_S))
        t = torch.ones(4)
        dist.all_reduce(t)
        assert t[0].item() == world
        big = torch.ones(BIG)
        if rank == leaver:
            if how == "early":
                time.sleep(0.2)  # the others are inside the all_reduce by now
            else:
                work = dist.all_reduce(big, async_op=True)
                del work, big  # the backend holds the last references
                time.sleep(0.02)
            report(events, "leaving", rank, os.getpid(), time.monotonic())
            if how == "crash":
                os._exit(0)
            if how in ("early", "destroy"):
                dist.destroy_process_group()
            report(events, "done", rank, None, time.monotonic())
            return
        if how != "early":
            time.sleep(0.2)  # the leaver has destroyed its group (or is about to) with the all_reduce in flight
        error = None
        try:
            dist.all_reduce(big)
            if how in ("destroy", "quit"):  # the leaver took part in that one before going
                dist.all_reduce(big)
        except RuntimeError as e:
            error = str(e)
        report(events, "error", rank, error, time.monotonic())
        dist.destroy_process_group()
        report(events, "done", rank, None, time.monotonic())
    except Exception:
        report(events, "exception", rank, traceback.format_exc(), time.monotonic())


class Rank:
    """One rank: a forked process or, for "quit" runs, a fresh interpreter (its shutdown is under test).
    Events reach `sink`: through the fork queue, or one line each on the subprocess's stdout."""

    def __init__(self, ctx, events, args, fresh, sink):
        self.proc = self.popen = None
        self.ended_at = None
        if fresh:
            self.popen = subprocess.Popen([sys.executable, __file__, "--rank"] + [str(a) for a in args],
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            threading.Thread(target=self._read, args=(sink,), daemon=True).start()
        else:
            self.proc = ctx.Process(target=rank_main, args=args + (events,))
            self.proc.start()

    def _read(self, sink):
        for line in self.popen.stdout:
            if line.startswith("("):
                sink.put(ast.literal_eval(line))

    def alive(self):
        alive = self.proc.is_alive() if self.proc else self.popen.poll() is None
        if not alive and self.ended_at is None:
            self.ended_at = time.monotonic()
        return alive

    def kill(self):
        if self.proc:
            self.proc.kill()
            self.proc.join()
        else:
            self.popen.kill()
            self.popen.wait()


def run(i):
    """Returns the failures of run i."""
    world, leaver, how, transport = scenario(i)
    what = f"run {i} ({world} ranks over {transport}, rank {leaver} leaves: {how})"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    events, sink = ctx.SimpleQueue(), queue.Queue()
    ranks = [Rank(ctx, events, (world, r, leaver, how, transport, port), how == "quit", sink) for r in range(world)]
    got = {}
    start = time.monotonic()
    limit = start + 30  # set up included; once the leaver has gone: its time + timeout + slack
    while time.monotonic() < limit:
        while not events.empty():
            sink.put(events.get())
        while not sink.empty():
            kind, rank, value, at = sink.get()
            got.setdefault(rank, {})[kind] = (value, at)
            if kind == "leaving":
                limit = min(limit, at + TIMEOUT_S + SLACK_S)
        if not any([r.alive() for r in ranks]):
            break
        time.sleep(0.01)
    bad = []
    for r, rank in enumerate(ranks):
        if rank.alive():
            rank.kill()
            bad.append(f"{what}: rank {r} was still running {TIMEOUT_S + SLACK_S:.0f} s after rank {leaver} left "
                       f"(it had reported {sorted(got.get(r, {}))})")
    time.sleep(0.05)  # the subprocess readers' last lines
    while not sink.empty():
        kind, rank, value, at = sink.get()
        got.setdefault(rank, {})[kind] = (value, at)
    for r in range(world):
        if "exception" in got.get(r, {}):
            bad.append(f"{what}: rank {r}: {got[r]['exception'][0]}")
    if "leaving" not in got.get(leaver, {}):
        return bad + [f"{what}: the leaver never got to leave"]
    name = f"rank {leaver} (host {socket.gethostname()}, pid {got[leaver]['leaving'][0]})"
    for r in range(world):
        if r == leaver:
            continue
        mine = got.get(r, {})
        if "error" in mine and mine["error"][0] is None:
            bad.append(f"{what}: rank {r}'s all_reduce succeeded without rank {leaver}")
        elif "error" in mine and name not in mine["error"][0]:
            bad.append(f"{what}: rank {r}'s error does not name {name}: {mine['error'][0]}")
        if "done" not in mine and not any(b.startswith(f"{what}: rank {r} ") for b in bad):
            bad.append(f"{what}: rank {r} never returned from destroy_process_group")
    return bad


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        world, rank, leaver = (int(a) for a in sys.argv[2:5])
        rank_main(world, rank, leaver, sys.argv[5], sys.argv[6], int(sys.argv[7]), None)
        return 0  # and the interpreter shuts down with the group in whatever state it is
    start = time.monotonic()
    bad = []
    for i in range(RUNS):
        bad += run(i)
    if bad:
        print("FAIL:\n" + "\n".join(bad), file=sys.stderr)
        return 1
    print(f"ok: {RUNS} runs of a rank leaving mid-collective ended within the deadline on every rank, "
          f"and every survivor named the rank that left ({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
