"""Pass 4: the plan's JSON, as the MSCCL++ executor's parser reads it.

The format is the one of MSCCL++'s ``ExecutionPlan`` (``src/core/executor/
execution_plan.cc``) and its Python DSL, at the version docs/runtimes.md pins: per GPU
the chunk counts of ``i``/``o``/``s``, its channels (``memory`` and ``port`` with the
peers they connect to; ``switch`` with the NVLS group), the remote buffers it writes, its
semaphores, and per thread block the channels and remote buffers it uses (by index into
the GPU's lists) and its ops (channels and buffers by index into the block's lists).
Every op moves ``size: 1`` chunk: the executor cuts the message into the chunk counts.
"""

from __future__ import annotations

import json
from typing import Any

from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.mscclpp.program import Program
from te_ccl.lower.mscclpp.threadblocks import GpuPlan

__all__ = ["plan_dict", "plan_dict_of", "plan_bytes", "threads_per_block", "MAX_MESSAGE"]

MAX_MESSAGE = 2**64 - 1  # the executor's default: no upper size limit
# A plan's blocks wait on each other, so all of a rank's blocks must be resident at once:
# at most RESIDENT_THREADS threads a GPU (128 blocks of 1024, what a 132-SM H100 holds
# at one block an SM), in blocks of at least MIN_THREADS.
RESIDENT_THREADS = 128 * 1024
MIN_THREADS = 256


def threads_per_block(blocks: int) -> int:
    """The most threads a block may have for ``blocks`` blocks a rank to be resident
    (:class:`RuntimeLimitError` beyond ``RESIDENT_THREADS / MIN_THREADS`` blocks).

    >>> threads_per_block(8), threads_per_block(200), threads_per_block(512)
    (1024, 512, 256)
    """
    for threads in (1024, 512, MIN_THREADS):
        if blocks * threads <= RESIDENT_THREADS:
            return threads
    raise RuntimeLimitError(f"{blocks} thread blocks on one rank; at most "
                            f"{RESIDENT_THREADS // MIN_THREADS} of {MIN_THREADS} threads can "
                            "all be resident (too many transfers a rank; try fewer chunks)")


def plan_dict(program: Program, plans: list[GpuPlan], *, name: str, min_bytes: int = 0,
              max_bytes: int = 0) -> dict[str, Any]:
    """The plan as a JSON object (``max_bytes=0``: no upper limit)."""
    coll = program.collective
    return plan_dict_of(name, coll.kind.value, coll.inplace,
                        [_gpu(program, p) for p in plans], min_bytes, max_bytes)


def plan_dict_of(name: str, collective: str, inplace: bool, gpus: list[dict[str, Any]],
                 min_bytes: int = 0, max_bytes: int = 0) -> dict[str, Any]:
    """The plan around its ranks' JSON objects (``max_bytes=0``: no upper limit)."""
    return {
        "name": name,
        "collective": collective,
        "protocol": "Simple",
        "inplace": inplace,
        "reuse_resources": False,
        "gpus": gpus,
        "num_threads_per_block": threads_per_block(max(len(g["threadblocks"]) for g in gpus)),
        "use_double_scratch_buffer": False,
        "buffer_alignment": 16,
        "min_message_size": min_bytes,
        "max_message_size": max_bytes or MAX_MESSAGE,
    }


def plan_bytes(plan: dict[str, Any]) -> bytes:
    """One GPU a line: a plan of thousands of ops stays quick to write and to diff."""
    head = json.dumps({k: v for k, v in plan.items() if k != "gpus"}, separators=(",", ":"))
    gpus = ",\n".join(json.dumps(g, separators=(",", ":")) for g in plan["gpus"])
    return (head[:-1] + ',"gpus":[\n' + gpus + "\n]}\n").encode()


def _gpu(program: Program, p: GpuPlan) -> dict[str, Any]:
    channels: list[dict[str, Any]] = [{"channel_type": t, "connected_to": peers}
                                      for t, peers in p.channels.items() if peers]
    for group, buf in p.groups:
        channels.append({"channel_type": "switch", "buffer_type": buf,
                         "rank_groups": [{"size": len(group), "ranks": list(group)}]})
    blocks = []
    for i, b in enumerate(p.blocks):
        tb_channels: list[dict[str, Any]] = []
        if b.channel >= 0:
            tb_channels.append({"channel_type": b.ctype, "channel_ids": [b.channel]})
        if b.switch:
            tb_channels.append({"channel_type": "switch",
                                "channel_ids": [p.groups.index(g) for g in b.switch]})
        refs = ([{"access_channel_type": b.ctype,
                  "remote_buffer_ids": [p.remote.index(r) for r in b.remote]}]
                if b.remote else [])
        blocks.append({"id": i, "ops": b.ops, "channels": tb_channels,
                       "remote_buffer_refs": refs})
    return {
        "id": p.gpu,
        "input_chunks": program.input_chunks * p.parts,
        "output_chunks": program.output_chunks * p.parts,
        "scratch_chunks": program.scratch[p.gpu] * p.parts,
        "threadblocks": blocks,
        "channels": channels,
        "remote_buffers": [{"rank": r, "type": t, "access_channel_types": [c]}
                           for r, t, c in p.remote],
        "semaphores": [{"init_value": 0} for _ in range(p.semaphores)],
    }
