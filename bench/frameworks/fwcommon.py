"""What every bench/frameworks worker shares: the report line, the CPU idle share
and the traffic on this host's link while the timed steps ran.

Works on any Python 3 (the frameworks' images have no other shared code).
"""
import json


def cpu_ticks():
    """(busy, total) jiffies of the whole machine, from /proc/stat, then the
    bytes this host's eth0 has sent and received (0, 0 where there is none)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    link = []
    for name in ("tx_bytes", "rx_bytes"):
        try:
            with open(f"/sys/class/net/eth0/statistics/{name}") as f:
                link.append(int(f.read()))
        except OSError:
            link.append(0)
    return (sum(v) - v[3] - v[4], sum(v), *link)


def report(samples, secs, world, before):
    """Prints the one JSON line run.sh reads: throughput, the share of the
    machine's CPU left idle, and this host's busier link direction in Mbit/s,
    over the timed steps (`before` is cpu_ticks() at their start)."""
    busy, total, tx, rx = cpu_ticks()
    idle = 100.0 - 100.0 * (busy - before[0]) / max(1, total - before[1])
    mbit = max(tx - before[2], rx - before[3]) * 8 / secs / 1e6
    print(json.dumps({"samples_per_s": samples / secs, "world": world, "idle_pct": round(idle, 1),
                      "link_mbit": round(mbit, 1)}), flush=True)
