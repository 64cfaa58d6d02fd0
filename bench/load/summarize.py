#!/usr/bin/python3
"""Summarize a JMeter CSV results file (JTL) per request kind (the sampler's label).

Usage: summarize.py RESULTS.jtl [--title TEXT]

Prints a plain table (count, throughput, p50/p90/p99/max ms, errors), the failures by
kind and response code, then the same table as markdown for docs/performance.md.
Throughput is count / the whole run's window (first sample's start to last sample's end,
ramp-up included), so the kinds' rates add up to the total. Percentiles are nearest-rank
over each sample's elapsed time (JMeter's: request sent to the last byte read).
Standard library only (run it with /usr/bin/python3).
"""
import argparse
import collections
import csv
import math
import sys

ORDER = ["login", "submit", "list", "show", "logs", "metrics", "file_put", "file_get"]


def pct(sorted_ms, p):
    if not sorted_ms:
        return 0
    return sorted_ms[max(0, math.ceil(p / 100 * len(sorted_ms)) - 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jtl")
    ap.add_argument("--title", default="", help="a line printed above the markdown table")
    args = ap.parse_args()

    elapsed = collections.defaultdict(list)
    errors = collections.Counter()
    # kind -> (code, response message) -> count, and an assertion's message for each
    why = collections.defaultdict(collections.Counter)
    example = {}
    first, last = None, None
    with open(args.jtl, newline="") as f:
        rows = csv.DictReader(f)
        need = {"timeStamp", "elapsed", "label", "success"}
        if not rows.fieldnames or not need <= set(rows.fieldnames):
            sys.exit(f"{args.jtl}: not a CSV JTL with a header (need {sorted(need)}); "
                     "run JMeter with -Jjmeter.save.saveservice.output_format=csv "
                     "-Jjmeter.save.saveservice.print_field_names=true")
        for r in rows:
            try:
                ts, ms = int(r["timeStamp"]), int(r["elapsed"])
            except (TypeError, ValueError):
                continue  # a torn last line of an interrupted run
            kind = r["label"]
            elapsed[kind].append(ms)
            first = ts if first is None else min(first, ts)
            last = ts + ms if last is None else max(last, ts + ms)
            if r["success"] != "true":
                errors[kind] += 1
                key = (r.get("responseCode") or "-", (r.get("responseMessage") or "").strip())
                why[kind][key] += 1
                fm = " ".join((r.get("failureMessage") or "").split())
                if fm and (kind, key) not in example:
                    example[(kind, key)] = fm[:160]
    if not elapsed:
        sys.exit(f"{args.jtl}: no samples")
    window = max((last - first) / 1000.0, 1e-3)

    kinds = [k for k in ORDER if k in elapsed] + sorted(k for k in elapsed if k not in ORDER)
    table = []
    for k in kinds + ["total"]:
        ms = sorted(elapsed[k] if k != "total" else [m for v in elapsed.values() for m in v])
        err = errors[k] if k != "total" else sum(errors.values())
        n = len(ms)
        table.append([k, str(n), f"{n / window:.1f}", str(pct(ms, 50)), str(pct(ms, 90)),
                      str(pct(ms, 99)), str(ms[-1]), str(err), f"{100.0 * err / n:.2f}"])
    head = ["kind", "count", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors", "error %"]

    widths = [max(len(row[i]) for row in table + [head]) for i in range(len(head))]
    line = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(row, widths)))
    print(f"{sum(len(v) for v in elapsed.values())} samples in {window:.1f} s")
    print(line(head))
    for row in table:
        if row[0] == "total":
            print("-" * len(line(head)))
        print(line(row))
    if why:
        print("\nfailures (kind: count x response code and message [the first assertion's]):")
        for k in kinds:
            for (code, msg), n in why[k].most_common(5):
                fm = example.get((k, (code, msg)))
                print(f"  {k}: {n} x {code} {msg}" + (f" [{fm}]" if fm else ""))
            if len(why[k]) > 5:
                print(f"  {k}: ... and {len(why[k]) - 5} other codes")

    print("\nmarkdown:\n")
    if args.title:
        print(args.title + "\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for row in table:
        cells = [f"**{c}**" if row[0] == "total" else c for c in row]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
