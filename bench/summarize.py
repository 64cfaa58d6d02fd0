#!/usr/bin/env python3
"""Turns ringcomm-bench --csv output into the Markdown tables of docs/performance.md.

usage: bench/summarize.py bench.csv   (stdlib only)
"""
import csv
import sys
from collections import defaultdict


def main(path):
    rows = []
    with open(path) as f:
        lines = [l for l in f if l.count(",") == 6 and not l.startswith("#")]
    for r in csv.DictReader(lines):
        if r["impl"] == "impl":
            continue
        rows.append(r)
    if not rows:
        sys.exit("no rows")
    ranks = rows[0]["ranks"]
    by_size = defaultdict(dict)
    for r in rows:
        name = f'{r["impl"]} {r["algorithm"]}'
        by_size[int(r["bytes"])][name] = float(r["busbw_GBps"])
    names = sorted({n for d in by_size.values() for n in d})
    print(f"busbw GB/s, {ranks} ranks (higher is better)\n")
    print("| bytes | " + " | ".join(names) + " | tcp: ours / Gloo best | shm: ours / MPI shm |")
    print("|---:|" + "---:|" * len(names) + "---:|---:|")
    for size in sorted(by_size):
        d = by_size[size]
        gloo = max((v for k, v in d.items() if k.startswith("gloo")), default=0)
        tcp = max((v for k, v in d.items() if k.startswith("ringcomm") and k.endswith("/tcp")), default=0)
        shm = max((v for k, v in d.items() if k.startswith("ringcomm") and k.endswith("/shm")), default=0)
        mpi = d.get("mpi default-shm", 0)
        cells = [f"{d[n]:.2f}" if n in d else "" for n in names]
        r1 = f"{tcp / gloo:.2f}" if gloo and tcp else ""
        r2 = f"{shm / mpi:.2f}" if mpi and shm else ""
        print(f"| {size // 1024} KiB | " + " | ".join(cells) + f" | {r1} | {r2} |")


if __name__ == "__main__":
    main(sys.argv[1])
