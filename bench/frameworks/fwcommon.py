"""What every bench/frameworks worker shares: the report line and the CPU idle share.

Works on any Python 3 (the frameworks' images have no other shared code).
"""
import json


def cpu_ticks():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4], sum(v)


def report(samples, secs, world, ticks_before):
    """Prints the one JSON line run.sh reads: throughput, and the share of the
    machine's CPU left idle while the timed steps ran."""
    busy, total = cpu_ticks()
    idle = 100.0 - 100.0 * (busy - ticks_before[0]) / max(1, total - ticks_before[1])
    print(json.dumps({"samples_per_s": samples / secs, "world": world, "idle_pct": round(idle, 1)}), flush=True)
