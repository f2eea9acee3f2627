"""Training workloads for ``teccl fred evaluate``, from their published model configuration.

A workload file (shipped ones in ``te_ccl/data/workloads/``) gives the model as it was
published and the training batch it was published with; every per-layer quantity the
evaluation needs follows from those by a stated rule, with no free parameter::

    name: GPT-3
    source: Brown et al. 2020, table 2.1 ...
    strategy: MP2-DP5-PP2         # the default parallelization (the FRED paper)
    weight_streaming: true        # weights streamed from the off-wafer I/O controllers
    global_batch: 1562.5          # samples (sequences) per iteration: 3.2M tokens / 2048
    transformer: {layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 50257,
                  params: 175e9}  # published total, checked against the layers (±3 %)
    paper: {speedup: {fred-c: 1.34, fred-d: 1.34}}   # figures to compare with, not to fit

A ``transformer`` model becomes one block per decoder layer and one for the embedding /
LM head (:data:`TRANSFORMER_RULES`). Other models list their ``blocks`` directly (e.g.
ResNet's bottleneck stages, computed from the paper's layer table), per sample:
``params``, ``fwd_flops`` (FLOPs, a multiply-add is 2), ``pp_elements`` (activations
leaving the block, sent between pipeline stages) and, where the model can be split over
model-parallel NPUs, ``mp_allreduce_elements`` × ``mp_allreduces`` (the All-Reduces of a
tensor-parallel block, forward and backward). A block list without activation sizes
cannot run model or pipeline parallelism: :func:`check_strategy` refuses it rather than
dropping that traffic.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from te_ccl.errors import SpecError

__all__ = ["Block", "Workload", "load_workload", "shipped_workloads", "check_strategy",
           "TRANSFORMER_RULES"]

_TOP_KEYS = {"name", "source", "strategy", "weight_streaming", "precision_bytes",
             "global_batch", "sample", "transformer", "blocks", "params", "paper", "notes"}
_BLOCK_KEYS = {"name", "count", "params", "fwd_flops", "mp_allreduce_elements",
               "mp_allreduces", "pp_elements"}
_TRANSFORMER_KEYS = {"layers", "hidden", "heads", "seq_len", "vocab", "params"}
PARAMS_TOLERANCE = 0.03

TRANSFORMER_RULES = (
    "transformer sample = one sequence of seq_len tokens",
    "decoder layer: 12·h² parameters; forward FLOPs per token 24·h² + 4·seq_len·h "
    "(matrix products and attention scores)",
    "tensor (model) parallelism as Megatron-LM: 2 All-Reduces of seq_len·h activations "
    "in the forward pass and 2 in the backward pass per layer",
    "pipeline stages exchange seq_len·h activations (forward) and their gradients "
    "(backward) per sequence",
    "embedding and LM head tied: vocab·h parameters, 2·vocab·h forward FLOPs per token",
)


@dataclass(frozen=True)
class Block:
    """A repeated layer group; per-sample quantities (elements, not bytes)."""

    name: str
    count: int
    params: float
    fwd_flops: float
    mp_allreduce_elements: float = 0.0
    mp_allreduces: int = 0
    pp_elements: float = 0.0


@dataclass(frozen=True)
class Workload:
    """A model, its published batch and how it is trained on the wafer."""

    name: str
    strategy: str
    blocks: tuple[Block, ...]
    global_batch: float
    sample: str
    precision_bytes: int = 2
    weight_streaming: bool = False
    heads: int | None = None  # model parallelism splits the heads
    source: str = ""
    rules: tuple[str, ...] = ()
    paper: dict[str, Any] | None = None

    @property
    def params(self) -> float:
        return sum(b.count * b.params for b in self.blocks)

    @property
    def splits_for_mp(self) -> bool:
        return any(b.mp_allreduces and b.mp_allreduce_elements for b in self.blocks)

    @property
    def splits_for_pp(self) -> bool:
        return any(b.pp_elements for b in self.blocks)

    @property
    def layers(self) -> int:
        """Blocks a pipeline can cut between."""
        return sum(b.count for b in self.blocks)


def check_strategy(workload: Workload, mp: int, pp: int) -> None:
    """Refuse a strategy the workload cannot run as modelled (clear message, exit 2)."""
    if mp > 1 and not workload.splits_for_mp:
        raise SpecError(f"{workload.name} gives no model-parallel activation sizes "
                        "(mp_allreduce_elements); use MP1", key="strategy")
    if mp > 1 and workload.heads is not None and workload.heads % mp:
        raise SpecError(f"MP{mp} does not divide {workload.name}'s {workload.heads} attention "
                        "heads", key="strategy")
    if pp > 1 and not workload.splits_for_pp:
        raise SpecError(f"{workload.name} gives no pipeline activation sizes (pp_elements); "
                        "use PP1", key="strategy")
    if pp > workload.layers:
        raise SpecError(f"PP{pp} exceeds {workload.name}'s {workload.layers} layers",
                        key="strategy")


def shipped_workloads() -> list[str]:
    root = resources.files("te_ccl.data") / "workloads"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml"))


def _number(d: dict, key: str, file: str, default: float | None = None,
            where: str = "") -> float:
    """A non-negative number; strings such as ``1.81e9`` (YAML 1.1 reads them as text) too."""
    value = d.get(key, default)
    name = f"{where}{key}"
    if value is None:
        raise SpecError("missing", file=file, key=name)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SpecError(f"expected a number, got {value!r}", file=file, key=name) from None
    if not number >= 0:
        raise SpecError(f"expected a non-negative number, got {value!r}", file=file, key=name)
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


def _transformer(t: Any, file: str) -> tuple[tuple[Block, ...], int, float]:
    """Blocks of a decoder-only transformer (:data:`TRANSFORMER_RULES`), heads, params."""
    if not isinstance(t, dict) or set(t) - _TRANSFORMER_KEYS:
        raise SpecError(f"expected a mapping with keys {', '.join(sorted(_TRANSFORMER_KEYS))}",
                        file=file, key="transformer")
    n = {k: _number(t, k, file, where="transformer.") for k in sorted(_TRANSFORMER_KEYS)}
    h, s, v = n["hidden"], n["seq_len"], n["vocab"]
    layer = Block("decoder layer", int(n["layers"]), 12 * h * h, s * (24 * h * h + 4 * s * h),
                  s * h, 4, s * h)
    head = Block("embedding and LM head", 1, v * h, 2 * v * h * s, 0.0, 0, s * h)
    return (layer, head), int(n["heads"]), n["params"]


def _blocks(raw: Any, file: str) -> tuple[Block, ...]:
    blocks = []
    for i, b in enumerate(raw or []):
        where = f"blocks[{i}]"
        if not isinstance(b, dict) or set(b) - _BLOCK_KEYS:
            raise SpecError(f"expected a mapping with keys {', '.join(sorted(_BLOCK_KEYS))}",
                            file=file, key=where)
        num = {k: _number(b, k, file, 0 if k not in ("params", "fwd_flops") else None,
                          f"{where}.") for k in _BLOCK_KEYS - {"name"}}
        blocks.append(Block(str(b.get("name", where)), int(num["count"]) or 1, num["params"],
                            num["fwd_flops"], num["mp_allreduce_elements"],
                            int(num["mp_allreduces"]), num["pp_elements"]))
    return tuple(blocks)


def _workload(d: dict, file: str) -> Workload:
    unknown = set(d) - _TOP_KEYS
    if unknown:
        raise SpecError(f"unknown key (expected {', '.join(sorted(_TOP_KEYS))})", file=file,
                        key=sorted(unknown)[0])
    if ("transformer" in d) == ("blocks" in d):
        raise SpecError("expected exactly one of transformer (a published configuration) "
                        "or blocks", file=file, key="transformer")
    heads, rules = None, ()
    if "transformer" in d:
        blocks, heads, published = _transformer(d["transformer"], file)
        rules, sample = TRANSFORMER_RULES, "sequence"
    else:
        blocks, published = _blocks(d["blocks"], file), _number(d, "params", file)
        sample = str(d.get("sample", "sample"))
        if not blocks:
            raise SpecError("expected at least one block", file=file, key="blocks")
    derived = sum(b.count * b.params for b in blocks)
    if abs(derived - published) > PARAMS_TOLERANCE * published:
        raise SpecError(f"the layers give {derived:.4g} parameters, not the published "
                        f"{published:.4g} (±{PARAMS_TOLERANCE:.0%})", file=file, key="params")
    batch = _number(d, "global_batch", file)
    if batch <= 0:
        raise SpecError("expected a positive number of samples", file=file, key="global_batch")
    paper = d.get("paper")
    if paper is not None and not isinstance(paper, dict):
        raise SpecError("expected a mapping of published figures", file=file, key="paper")
    notes = tuple(str(x) for x in d.get("notes", []))
    return Workload(str(d.get("name", file)), str(d.get("strategy", "DP20")), blocks, batch,
                    sample, int(_number(d, "precision_bytes", file, 2)),
                    bool(d.get("weight_streaming", False)), heads, str(d.get("source", "")),
                    rules + notes, paper)
