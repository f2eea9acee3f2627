"""Collectives: what data starts where and must end where (pre- and postconditions)."""

from te_ccl.collective.model import (
    KINDS,
    Chunk,
    Collective,
    CollectiveKind,
    CustomDemand,
)

__all__ = ["KINDS", "Chunk", "Collective", "CollectiveKind", "CustomDemand"]
