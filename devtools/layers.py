"""The pipeline's layers, which ``tests/test_import_cycles.py`` enforces on imports and
``python -m devtools.topology_path`` uses to count a compile's steps back.

>>> layer("te_ccl.model.ten") < layer("te_ccl.lower.msccl")
True
"""

from __future__ import annotations

__all__ = ["LAYERS", "layer"]

# The pipeline's layers, lowest first: a module imports only its own layer and those below.
# Verification and simulation read outputs back and sit just above the IR: they never
# import the model, the solvers, the templates or the lowering.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "units", "deadline", "nogc", "background", "outputs", "runtime_limits"),
    ("topology", "collective", "schedule", "importers", "spec"),
    ("verify", "simulate", "report"),
    ("bounds",),
    ("model",),
    ("backends", "baselines"),
    ("fred",),
    ("lower",),
    ("compiler",),
    ("jobs", "sweep", "api", ""),
)


def layer(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s package (``te_ccl`` itself: the top)."""
    package = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if package in names:
            return i
    raise ValueError(f"{module}: its package is in no layer of LAYERS")
