"""Ringmaster's ringcomm as a torch.distributed backend.

    import ringmaster_torch  # registers the backend "ringmaster"
    torch.distributed.init_process_group(backend="ringmaster")

Collectives run on ringcomm (ring all-reduce over TCP between hosts, shared
memory within one; RINGMASTER_TRANSPORT=tcp|shm|auto overrides), and tagged
send/recv on its point-to-point channels. CPU tensors only. Inside a
Ringmaster `distributed` job the usual env:// variables (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE) are set by the platform.
"""
import torch.distributed as dist

from . import _C

BACKEND = "ringmaster"


def _create(store, rank, world_size, timeout):
    return _C.create_process_group(store, rank, world_size, timeout)


if not hasattr(dist.Backend, BACKEND.upper()):
    dist.Backend.register_backend(BACKEND, _create)

__all__ = ["BACKEND"]
