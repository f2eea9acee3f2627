"""Training workloads for ``teccl fred evaluate``: layers, compute and message sizes (YAML).

A workload file (shipped ones in ``te_ccl/data/workloads/``) says where every number
comes from (``source``, ``assumptions``) and gives::

    name: GPT-3
    strategy: MP2-DP5-PP2          # the default parallelization
    precision_bytes: 2             # FP16 weights, gradients, activations
    npu_flops: 300e12               # sustained FLOP/s per NPU
    microbatches: 8
    samples_per_microbatch: 1      # per data-parallel replica
    weight_streaming: false        # weights streamed from the I/O controllers
    dp_overlap: 0.0                # share of the DP All-Reduce hidden behind compute
    blocks:                        # repeated layer groups
      - {name: decoder, count: 96, params: 1.81e9, fwd_flops: 4.5e12,
         mp_allreduce_bytes: 50331648, mp_allreduces: 4, pp_bytes: 50331648}

Per-sample quantities: ``fwd_flops`` (forward FLOPs of one block), ``mp_allreduce_bytes``
(one MP All-Reduce, the activations of one block), ``pp_bytes`` (activations leaving a
block, sent between pipeline stages). Backward costs twice the forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from te_ccl.errors import SpecError

__all__ = ["Block", "Workload", "load_workload", "shipped_workloads"]

_TOP_KEYS = {"name", "source", "assumptions", "strategy", "precision_bytes", "npu_flops",
             "microbatches", "samples_per_microbatch", "weight_streaming", "dp_overlap",
             "blocks"}
_BLOCK_KEYS = {"name", "count", "params", "fwd_flops", "mp_allreduce_bytes", "mp_allreduces",
               "pp_bytes"}


@dataclass(frozen=True)
class Block:
    name: str
    count: int
    params: float
    fwd_flops: float
    mp_allreduce_bytes: float = 0.0
    mp_allreduces: int = 0
    pp_bytes: float = 0.0


@dataclass(frozen=True)
class Workload:
    name: str
    strategy: str
    blocks: tuple[Block, ...]
    npu_flops: float
    precision_bytes: int = 2
    microbatches: int = 1
    samples_per_microbatch: float = 1.0
    weight_streaming: bool = False
    dp_overlap: float = 0.0
    source: str = ""
    assumptions: tuple[str, ...] = ()

    @property
    def params(self) -> float:
        return sum(b.count * b.params for b in self.blocks)


def shipped_workloads() -> list[str]:
    root = resources.files("te_ccl.data") / "workloads"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml"))


def _number(d: dict, key: str, file: str, default: float | None = None) -> float:
    """A non-negative number; strings such as ``1.81e9`` (YAML 1.1 reads them as text) too."""
    value = d.get(key, default)
    if value is None:
        raise SpecError("missing", file=file, key=key)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SpecError(f"expected a number, got {value!r}", file=file, key=key) from None
    if not number >= 0:
        raise SpecError(f"expected a non-negative number, got {value!r}", file=file, key=key)
    return number


def load_workload(name_or_path: str) -> Workload:
    """A shipped workload by name (``gpt3``) or a YAML file path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        if name_or_path not in shipped_workloads():
            raise SpecError(f"unknown workload; expected a file or one of "
                            f"{', '.join(shipped_workloads())}", file=name_or_path)
        text = (resources.files("te_ccl.data") / "workloads" / f"{name_or_path}.yaml").read_text()
    else:
        try:
            text = path.read_text()
        except OSError as e:
            raise SpecError(f"cannot read ({e.strerror})", file=name_or_path) from None
    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"not YAML ({e})", file=name_or_path) from None
    if not isinstance(d, dict):
        raise SpecError("expected a mapping", file=name_or_path)
    return _workload(d, name_or_path)


def _workload(d: dict, file: str) -> Workload:
    unknown = set(d) - _TOP_KEYS
    if unknown:
        raise SpecError(f"unknown key (expected {', '.join(sorted(_TOP_KEYS))})", file=file,
                        key=sorted(unknown)[0])
    blocks = []
    for i, b in enumerate(d.get("blocks") or []):
        where = f"blocks[{i}]"
        if not isinstance(b, dict) or set(b) - _BLOCK_KEYS:
            raise SpecError(f"expected a mapping with keys {', '.join(sorted(_BLOCK_KEYS))}",
                            file=file, key=where)
        blocks.append(Block(str(b.get("name", where)), int(_number(b, "count", file, 1)),
                            _number(b, "params", file), _number(b, "fwd_flops", file),
                            _number(b, "mp_allreduce_bytes", file, 0),
                            int(_number(b, "mp_allreduces", file, 0)),
                            _number(b, "pp_bytes", file, 0)))
    if not blocks:
        raise SpecError("expected at least one block", file=file, key="blocks")
    overlap = _number(d, "dp_overlap", file, 0.0)
    if overlap > 1:
        raise SpecError("expected a fraction in [0, 1]", file=file, key="dp_overlap")
    return Workload(str(d.get("name", file)), str(d.get("strategy", "DP20")), tuple(blocks),
                    _number(d, "npu_flops", file), int(_number(d, "precision_bytes", file, 2)),
                    int(_number(d, "microbatches", file, 1)),
                    _number(d, "samples_per_microbatch", file, 1.0),
                    bool(d.get("weight_streaming", False)), overlap,
                    str(d.get("source", "")), tuple(str(a) for a in d.get("assumptions", [])))
