#!/usr/bin/python3
"""Prints bench/frameworks' tables from its raw rows ("FRAMEWORK MODEL N SAMPLES_PER_S IDLE_PCT LINK_MBIT").

One table per model: every framework at every N, its scaling efficiency
(throughput_N / (N x throughput_1), throughput_1 being the framework's own
single worker without exchange), its ratio to Horovod and to each
parameter-server run at the same N, the machine's idle CPU while it ran, the
busier direction of the reporting process's link in Mbit/s (rank 0's for the
rings; the ps host's for tf-ps; for mxnet-ps a worker's, whose server's link
carries N times that), and what ringmaster-sim's communication model (`ringmaster-sim comm`) predicts for
the same gradient bytes, N and link rate, from the framework's own N=1 step
time: serial (compute then exchange) .. overlapped (max of the two). Then the
verdict on the target: the ringmaster rows ahead of every PS run and within
10% of Horovod or ahead.
"""
import argparse
import collections
import csv
import io
import os
import subprocess

STRUCTURE = {"ringmaster-train": "ring", "ddp-ringmaster": "ring", "ddp-gloo": "ring", "horovod": "ring",
             "tf-ring": "ring", "tf-ps": "PS", "mxnet-ps": "PS"}
ORDER = list(STRUCTURE)
GRAD_BYTES = {"lenet5": 61706 * 4, "mlp-wide": 3581962 * 4}
OURS = ("ringmaster-train", "ddp-ringmaster")
PS_RUNS = ("tf-ps", "mxnet-ps")
CPU_BOUND_IDLE = 10.0  # below this share of idle CPU, a run was short of CPU
LINK_BOUND = 0.85  # above this share of the rate, the link was the limit (TCP payload tops out near 0.95)


def mbit(rate):
    """tc's rate syntax (1gbit, 100mbit, 800kbit) in Mbit/s."""
    for suffix, mult in (("gbit", 1e3), ("mbit", 1.0), ("kbit", 1e-3), ("bit", 1e-6)):
        if rate.lower().endswith(suffix):
            return float(rate[:-len(suffix)]) * mult
    return float(rate) / 1e6


def predict(sim, model, compute_s, batch, rate, exchange, workers):
    """{N: (serial, overlapped) samples/s} from ringmaster-sim comm, or {} without it."""
    if not os.access(sim, os.X_OK):
        return {}
    out = subprocess.run([sim, "comm", "--bytes", str(GRAD_BYTES[model]), "--compute-s", f"{compute_s:.6f}",
                          "--batch", str(batch), "--rate", rate, "--exchange", exchange,
                          "--workers", ",".join(map(str, workers))], capture_output=True, text=True, check=True).stdout
    return {int(r["workers"]): (float(r["serial_samples_per_s"]), float(r["overlapped_samples_per_s"]))
            for r in csv.DictReader(io.StringIO(out))}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--sim", default="build/src/sim/ringmaster-sim")
    a = p.parse_args()
    rows = collections.defaultdict(dict)  # model -> {(fw, n): (sps, idle, link Mbit/s)}
    for line in open(a.results):
        f = line.split()
        if len(f) == 6:
            rows[f[1]][(f[0], int(f[2]))] = (float(f[3]), float(f[4]), float(f[5]))
    verdicts = []
    for model in [m for m in GRAD_BYTES if m in rows]:
        r = rows[model]
        ns = sorted({n for _, n in r})
        print(f"\n{model}: {GRAD_BYTES[model] / 1e6:.2f} MB of float32 gradients per step, batch {a.batch} per worker, "
              f"{a.rate} links; sim = ringmaster-sim comm from the framework's own N=1 step (serial..overlapped)")
        head = ["framework", "struct", "N", "samples/s", "eff", "/horovod"] + [f"/{x}" for x in PS_RUNS] + \
               ["idle%", "link Mbit/s", "sim samples/s", "meas/sim-serial"]
        print("{:<17} {:>6} {:>2} {:>10} {:>6} {:>9} {:>7} {:>10} {:>6} {:>11} {:>16} {:>15}".format(*head))
        for fw in [f for f in ORDER if any(k[0] == f for k in r)]:
            base = r.get((fw, 1))
            sim = {}
            if base:
                exch = "ps" if STRUCTURE[fw] == "PS" else "ring"
                sim = predict(a.sim, model, a.batch / base[0], a.batch, a.rate, exch, ns)
            for n in ns:
                if (fw, n) not in r:
                    continue
                sps, idle, link = r[(fw, n)]
                eff = f"{sps / (n * base[0]):.2f}" if base else "-"

                def ratio(other):
                    o = r.get((other, n))
                    return f"{sps / o[0]:.2f}" if o and other != fw and n > 1 else "-"
                s = sim.get(n)
                sim_txt = f"{s[0]:.0f}..{s[1]:.0f}" if s else "-"
                vs_sim = f"{sps / s[0]:.2f}" if s else "-"
                print("{:<17} {:>6} {:>2} {:>10.1f} {:>6} {:>9} {:>7} {:>10} {:>6.0f} {:>11.0f} {:>16} {:>15}".format(
                    fw, STRUCTURE[fw], n, sps, eff, ratio("horovod"), *[ratio(x) for x in PS_RUNS], idle, link,
                    sim_txt, vs_sim))
        for n in [n for n in ns if n > 1]:
            for ours in OURS:
                if (ours, n) not in r:
                    continue
                sps, idle, link = r[(ours, n)]
                ps = [(x, r[(x, n)][0]) for x in PS_RUNS if (x, n) in r]
                hvd = r.get(("horovod", n))
                ahead_ps = all(sps > v for _, v in ps) if ps else None
                near_hvd = sps >= 0.9 * hvd[0] if hvd else None
                met = ahead_ps is not False and near_hvd is not False and (ps or hvd)
                why = []
                if ahead_ps is False:
                    why.append("behind " + ", ".join(f"{x} ({v:.0f})" for x, v in ps if v >= sps))
                if near_hvd is False:
                    why.append(f"{sps / hvd[0]:.2f} x horovod ({hvd[0]:.0f})")
                if idle < CPU_BOUND_IDLE:
                    why.append(f"CPU-bound: {idle:.0f}% idle, link at {link:.0f} Mbit/s")
                elif link > LINK_BOUND * mbit(a.rate):
                    why.append(f"link-bound: {link:.0f} Mbit/s")
                state = "MISSED" if not met else "MET" if ps and hvd else "MET where compared"
                verdicts.append(f"{model} N={n} {ours}: {sps:.0f} samples/s: {state}"
                                f"{' (' + '; '.join(why) + ')' if why else ''}"
                                f"{'' if ps else ' [no PS run]'}{'' if hvd else ' [no horovod run]'}")
    print("\ntarget: the ringmaster ring ahead of every PS run and within 10% of Horovod or ahead")
    for v in verdicts:
        print("  " + v)


if __name__ == "__main__":
    main()
