#!/usr/bin/python3
"""The GPU examples' logic on a machine without a GPU (Debian's CPU-only torch).

What can be checked here: examples/ddp_fmnist.py picks cuda:LOCAL_RANK for
nccl and refuses impossible combinations with a clear message, divides CPU
threads by RINGMASTER_LOCAL_TASKS, and its --dry-run reaches the GPU branch
with torch.cuda faked to report one device; examples/gpu_smoke.py says what is
missing and exits 1. Real NCCL training and the real matmul need a GPU node
(docs/training.md says how to run them there).
"""
import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import unittest
from unittest import mock

import torch

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ddp = load("ddp_fmnist")


class PickDevice(unittest.TestCase):
    def test_cpu_backends_default_to_the_cpu(self):
        for backend in ("gloo", "ringmaster"):
            self.assertEqual(ddp.pick_device(backend, "auto", {}, True, 2), torch.device("cpu"))

    def test_nccl_trains_on_the_gpu_local_rank_names(self):
        self.assertEqual(ddp.pick_device("nccl", "auto", {"LOCAL_RANK": "0"}, True, 1), torch.device("cuda", 0))
        # torchrun inside a task with two GPUs numbers its processes 0 and 1.
        self.assertEqual(ddp.pick_device("nccl", "cuda", {"LOCAL_RANK": "1"}, True, 2), torch.device("cuda", 1))
        self.assertEqual(ddp.pick_device("gloo", "cuda", {}, True, 1), torch.device("cuda", 0))

    def test_impossible_choices_are_refused_saying_why(self):
        cases = [
            (("nccl", "auto", {"CUDA_VISIBLE_DEVICES": "3"}, False, 0), "torch sees no CUDA device (CUDA_VISIBLE_DEVICES=3"),
            (("nccl", "auto", {"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "5"}, True, 1),
             "LOCAL_RANK 1, but this task sees 1 GPU(s) (CUDA_VISIBLE_DEVICES=5)"),
            (("nccl", "cpu", {}, True, 1), "--backend nccl: NCCL reduces GPU tensors"),
            (("ringmaster", "cuda", {}, True, 1), "--backend ringmaster: the ringmaster backend takes CPU tensors"),
            (("mpi", "auto", {}, True, 1), "--backend: 'mpi' is not one of gloo, ringmaster, nccl"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                with self.assertRaises(ValueError) as e:
                    ddp.pick_device(*args)
                self.assertIn(message, str(e.exception))


class Threads(unittest.TestCase):
    def test_cores_are_shared_by_the_gangs_tasks_on_the_node(self):
        self.assertEqual(ddp.default_threads({}, 8), 8)
        self.assertEqual(ddp.default_threads({"RINGMASTER_LOCAL_TASKS": "2"}, 8), 4)
        self.assertEqual(ddp.default_threads({"RINGMASTER_LOCAL_TASKS": "16"}, 8), 1)
        # LOCAL_WORLD_SIZE is 1 for every task: it says nothing about the node's CPUs.
        self.assertEqual(ddp.default_threads({"LOCAL_WORLD_SIZE": "1", "RINGMASTER_LOCAL_TASKS": "4"}, 8), 2)


class DryRun(unittest.TestCase):
    def run_main(self, argv, env):
        out = io.StringIO()
        with mock.patch.object(sys, "argv", ["ddp_fmnist.py"] + argv), mock.patch.dict(os.environ, env, clear=False), \
                contextlib.redirect_stdout(out):
            ddp.main()
        return out.getvalue()

    def test_the_gpu_branch_with_one_faked_device(self):
        # A one-GPU task: CUDA shows its GPU (node index 1) as device 0.
        with mock.patch.object(torch.cuda, "is_available", return_value=True), \
                mock.patch.object(torch.cuda, "device_count", return_value=1), \
                mock.patch.object(torch.cuda, "get_device_name", return_value="Fake H200") as name:
            out = self.run_main(["--backend", "nccl", "--dry-run"],
                                {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                                 "CUDA_VISIBLE_DEVICES": "1", "RINGMASTER_LOCAL_TASKS": "2"})
        name.assert_called_once_with(torch.device("cuda", 0))
        cores = os.cpu_count() or 1
        self.assertEqual(out, f"rank 1 of 2: backend nccl, device cuda:0 (Fake H200), {max(1, cores // 2)} threads, "
                              "LOCAL_RANK 0 of 1, CUDA_VISIBLE_DEVICES 1\n")

    def test_nccl_without_a_gpu_exits_2_with_the_reason(self):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "ddp_fmnist.py"), "--backend", "nccl", "--dry-run"],
                           env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("ddp_fmnist.py: --device cuda: torch sees no CUDA device (CUDA_VISIBLE_DEVICES=", r.stderr)


class GpuSmoke(unittest.TestCase):
    def test_without_a_gpu_it_prints_what_it_sees_and_fails(self):
        if torch.cuda.is_available():
            self.skipTest("this machine has a GPU: the smoke test would pass")
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", LOCAL_RANK="0", RINGMASTER_GPUS="2")
        r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "gpu_smoke.py")], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("RINGMASTER_GPUS=2\nCUDA_VISIBLE_DEVICES=0\n", r.stdout)
        self.assertIn("gpu_smoke: torch sees no CUDA device", r.stderr)


if __name__ == "__main__":
    unittest.main()
