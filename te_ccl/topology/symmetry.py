"""A torus's symmetries: translations map its nodes onto each other and its links onto
links, so a problem that is the same at every node is solved for one and translated.

:func:`torus_symmetry` (equal sides, identical links) adds the group of axis rotations ×
sign flip on the direction classes ``±e_i``, which the scale backends' broadcast trees
use; :func:`translations` needs only that each translation keeps every link's bandwidth
(any sides, a bandwidth per dimension), which the AlltoAll bound's LP uses.

>>> from te_ccl.topology.generators import torus
>>> sym = torus_symmetry(torus([3, 3], 1e9))
>>> sym.dims, len(sym.group), sym.classes
((3, 3), 4, ((1, 0), (0, 1), (-1, 0), (0, -1)))
>>> translations(torus([3, 5], 1e9)).shape
(15, 15)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from te_ccl.topology.model import Topology

__all__ = ["TorusSymmetry", "torus_symmetry", "translate", "translations"]

Vec = tuple[int, ...]


@dataclass(frozen=True)
class TorusSymmetry:
    """Coordinates of a torus with equal sides and its direction-class group."""

    dims: tuple[int, ...]
    names: tuple[str, ...]  # GPU name of each row-major rank
    classes: tuple[Vec, ...]
    group: tuple[tuple[int, ...], ...]  # per element: class index each class maps to

    def rank(self, coords: np.ndarray) -> np.ndarray:
        """Row-major rank of (…, dim) coordinates taken modulo the sides."""
        n = self.dims[0]
        out = np.zeros(coords.shape[:-1], dtype=np.int64)
        for axis in range(len(self.dims)):
            out = out * n + coords[..., axis] % n
        return out


def _classes(ndim: int) -> tuple[Vec, ...]:
    unit = [tuple(int(i == a) for i in range(ndim)) for a in range(ndim)]
    return tuple(unit) + tuple(tuple(-x for x in u) for u in unit)


def _group(ndim: int, classes: tuple[Vec, ...]) -> tuple[tuple[int, ...], ...]:
    """Cyclic axis shifts × sign: a group acting simply transitively on the classes."""
    index = {c: i for i, c in enumerate(classes)}
    elements = []
    for sign in (1, -1):
        for shift in range(ndim):
            elements.append(tuple(index[tuple(sign * c[(a - shift) % ndim] for a in range(ndim))]
                                  for c in classes))
    return tuple(elements)


def torus_symmetry(topology: Topology) -> TorusSymmetry | None:
    """The symmetry of a generated torus with equal sides and identical links, else None."""
    meta = topology.meta or {}
    dims = tuple(meta.get("dims") or ())
    if meta.get("generator") != "torus" or not dims or len(set(dims)) != 1 or topology.switches:
        return None
    if len({(k.bandwidth_Bps, k.latency_s) for k in topology.links}) != 1:
        return None
    names = topology.gpus
    classes = _classes(len(dims))
    coords = list(itertools.product(*(range(d) for d in dims)))
    if len(coords) != len(names) or len(topology.links) != len(coords) * len(classes):
        return None
    sym = TorusSymmetry(dims, names, classes, _group(len(dims), classes))
    for c in coords:
        here = names[int(sym.rank(np.array(c)))]
        for e in classes:
            there = names[int(sym.rank(np.array(c) + np.array(e)))]
            if not topology.has_link(here, there):
                return None
    return sym


def translate(sym: TorusSymmetry, tails: np.ndarray, cls: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """(sources × edges) ranks of tails and heads for orbit edges at offsets ``tails``."""
    n = len(sym.names)
    origin = np.array(list(itertools.product(*(range(d) for d in sym.dims))), dtype=np.int64)
    vec = np.array(sym.classes, dtype=np.int64)[cls]
    assert len(origin) == n
    u = sym.rank(origin[:, None, :] + tails[None, :, :])
    v = sym.rank(origin[:, None, :] + tails[None, :, :] + vec[None, :, :])
    return u, v


def translations(topology: Topology) -> np.ndarray | None:
    """The translations of a generated torus (any sides) as permutations of
    ``topology.gpus`` (row ``g``: where each GPU goes; row 0 the identity), if each
    maps every link onto a link of the same bandwidth; else None. The unit steps
    generate the group, so only they are checked."""
    meta = topology.meta or {}
    dims = tuple(meta.get("dims") or ())
    n = len(topology.gpus)
    if meta.get("generator") != "torus" or not dims or topology.switches or n != int(np.prod(dims)):
        return None
    coords = np.array(list(itertools.product(*(range(d) for d in dims))), dtype=np.int64)
    perms = np.ravel_multi_index(((coords[:, None, :] + coords[None, :, :]) % dims).T, dims).T
    index = {name: i for i, name in enumerate(topology.gpus)}
    bandwidth = {(index[k.src], index[k.dst]): k.bandwidth_Bps for k in topology.links}
    for axis in range(len(dims)):
        step = perms[int(np.ravel_multi_index(np.eye(len(dims), dtype=np.int64)[axis], dims))]
        if any(bandwidth.get((int(step[u]), int(step[v]))) != b for (u, v), b in bandwidth.items()):
            return None
    return perms
