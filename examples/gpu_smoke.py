#!/usr/bin/env python3
"""A GPU node's smoke test: what a one-GPU task sees, and a matmul on it.

Run it as a Ringmaster job (examples/gpu_smoke.yaml) after installing the
NVIDIA driver (docs/install.md). It prints the platform's GPU variables, what
torch sees (device count, name, compute capability, memory), then multiplies
two 1024x1024 matrices on cuda:LOCAL_RANK and checks the product against the
CPU's. Exit 0 when all is well; 1 with a line saying what is missing.
Needs a CUDA build of torch (`pip install torch`, or an image with one).
"""
import os
import sys

import torch


def main():
    env = os.environ
    for k in ("RINGMASTER_GPUS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        print(f"{k}={env.get(k, '(unset)')}", flush=True)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda or '(none: a CPU-only build)'}", flush=True)
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print("gpu_smoke: torch sees no CUDA device: check that the job asked for resources.gpu, that the node's "
              "driver works (nvidia-smi) and that torch is a CUDA build", file=sys.stderr, flush=True)
        return 1
    count = torch.cuda.device_count()
    print(f"device count {count}", flush=True)
    for i in range(count):
        p = torch.cuda.get_device_properties(i)
        print(f"cuda:{i} {p.name}, capability {p.major}.{p.minor}, {p.total_memory / 2**30:.1f} GiB, "
              f"{p.multi_processor_count} SMs", flush=True)
    local_rank = int(env.get("LOCAL_RANK", "0"))
    if local_rank >= count:
        print(f"gpu_smoke: LOCAL_RANK {local_rank}, but this task sees {count} GPU(s)", file=sys.stderr, flush=True)
        return 1
    device = torch.device("cuda", local_rank)
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g)
    on_gpu = (a.to(device) @ b.to(device)).cpu()
    err = (on_gpu - a @ b).abs().max().item()
    # TF32 (on by default for matmuls on Ampere and later in some torch versions) rounds to ~1e-3.
    ok = err < 0.5
    print(f"matmul 1024x1024 on {device}: max difference from the CPU's {err:.2e} ({'ok' if ok else 'WRONG'})",
          flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
