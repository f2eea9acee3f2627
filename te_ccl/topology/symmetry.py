"""A fabric's symmetries: an automorphism maps its nodes onto each other and its links
onto links alike, so a problem that is the same at every node is solved for one node per
orbit and moved.

:func:`torus_symmetry` (equal sides, identical links): a torus's translations and the
group of axis rotations × sign flip on the direction classes ``±e_i``, which the scale
backends' broadcast trees use.

>>> from te_ccl.topology.generators import torus
>>> sym = torus_symmetry(torus([3, 3], 1e9))
>>> sym.dims, len(sym.group), sym.classes
((3, 3), 4, ((1, 0), (0, 1), (-1, 0), (0, -1)))

:func:`automorphisms` finds generators of a group of any fabric's automorphisms (a
mesh's reflections and axis swaps, a torus's translations too, a rail fabric's box and
rail permutations), each checked link by link, and :func:`orbits` the orbits they
generate; the AlltoAll bound's LP keeps one source per orbit of members.

>>> from te_ccl.topology.generators import mesh
>>> m = mesh([4, 4], 1e9)
>>> len(set(orbits(automorphisms(m, m.gpus), len(m.nodes)).tolist()))  # corners, sides, middle
3
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from te_ccl.topology.model import Topology

__all__ = ["TorusSymmetry", "automorphisms", "link_moves", "orbits", "torus_symmetry",
           "translate"]

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


def _gpu_grids(topology: Topology) -> list[tuple[int, ...]]:
    """The shapes the GPUs' rank order may fill: a generated grid's sides or boxes × GPUs
    per box where the generator says so, then one axis and every two-factor shape (the
    boxes, leaves or rails of a fabric numbered group by group)."""
    meta, n = topology.meta or {}, len(topology.gpus)
    shapes = []
    if meta.get("generator") in ("mesh", "torus"):
        shapes.append(tuple(meta.get("dims") or ()))
    elif meta.get("generator") == "boxes":
        shapes.append((meta.get("boxes", 0), meta.get("box_gpus", 0)))
    shapes += [(n,)] + [(a, n // a) for a in range(2, n) if n % a == 0]
    return [s for s in dict.fromkeys(shapes) if s and int(np.prod(s)) == n]


def _candidates(shape: tuple[int, ...]) -> list[np.ndarray]:
    """GPU permutations that may be automorphisms (row ``i``: where GPU ``i`` goes): per
    axis a reflection, a shift by one and a swap of its first two places; per pair of
    equal axes, their exchange. Together they generate every symmetry of a mesh, torus,
    fully connected set or rail fabric that keeps the grid."""
    grid = np.arange(int(np.prod(shape))).reshape(shape)
    moved = []
    for axis, size in enumerate(shape):
        if size >= 2:
            moved += [np.flip(grid, axis), np.roll(grid, 1, axis)]
        if size >= 3:
            moved.append(np.take(grid, [1, 0, *range(2, size)], axis))
    moved += [np.swapaxes(grid, a, b) for a, b in itertools.combinations(range(len(shape)), 2)
              if shape[a] == shape[b]]
    perms = []
    for m in moved:
        p = np.empty(grid.size, dtype=np.int64)
        p[grid.ravel()] = m.ravel()
        perms.append(p)
    return perms


class _Fabric:
    """A topology as node indices, each node's links (direction, neighbour, bandwidth,
    latency) and its attributes but the name: what an automorphism must keep."""

    def __init__(self, topology: Topology) -> None:
        self.index = {n.name: i for i, n in enumerate(topology.nodes)}
        self.kind = [replace(n, name="") for n in topology.nodes]
        self.gpus = np.array([self.index[g] for g in topology.gpus], dtype=np.int64)
        self.links = {(self.index[k.src], self.index[k.dst]): (k.bandwidth_Bps, k.latency_s)
                      for k in topology.links}
        self.near: list[list[tuple[int, int, float, float]]] = [[] for _ in topology.nodes]
        for (u, v), (b, a) in self.links.items():
            self.near[u].append((1, v, b, a))
            self.near[v].append((-1, u, b, a))

    def extend(self, gpu_perm: np.ndarray) -> np.ndarray | None:
        """A node permutation that moves GPU ``gpus[i]`` to ``gpus[gpu_perm[i]]``, each
        switch to one whose links to the nodes placed so far are the images of its own,
        if every switch finds one; else None."""
        perm = np.full(len(self.kind), -1, dtype=np.int64)
        perm[self.gpus] = self.gpus[gpu_perm]
        images = set(perm[self.gpus].tolist())
        left = [i for i in range(len(self.kind)) if perm[i] < 0]
        while left:
            free: dict[tuple, list[int]] = {}
            for t in range(len(self.kind)):
                if t not in images:
                    free.setdefault(self._seen(t, images), []).append(t)
            waiting = []
            for s in left:
                key = sorted((d, int(perm[v]), b, a) for d, v, b, a in self.near[s] if perm[v] >= 0)
                targets = free.get(tuple(key)) if key else None
                if targets:
                    perm[s] = targets.pop()
                    images.add(int(perm[s]))
                else:
                    waiting.append(s)
            if len(waiting) == len(left):
                return None
            left = waiting
        return perm

    def _seen(self, t: int, images: set[int]) -> tuple:
        return tuple(sorted(x for x in self.near[t] if x[1] in images))

    def keeps(self, perm: np.ndarray) -> bool:
        """Whether ``perm`` is an automorphism: a bijection of the nodes that keeps each
        node's attributes and maps every link onto a link of the same bandwidth and
        latency (so onto the links, there being as many)."""
        if sorted(perm.tolist()) != list(range(len(self.kind))):
            return False
        if any(self.kind[int(perm[i])] != k for i, k in enumerate(self.kind)):
            return False
        return all(self.links.get((int(perm[u]), int(perm[v]))) == x
                   for (u, v), x in self.links.items())


def automorphisms(topology: Topology, members: Sequence[str]) -> list[np.ndarray]:
    """Generators of a group of automorphisms of ``topology`` that keep the set
    ``members``, each a permutation of ``topology.nodes``' indices (entry ``i``: where
    node ``i`` goes). Candidates come from the GPUs' rank order (:func:`_candidates` of
    each of :func:`_gpu_grids`);
    each is kept only once checked (:meth:`_Fabric.keeps`), so the group is one of the
    fabric's whatever the candidates: none found, the trivial group (empty list)."""
    fabric = _Fabric(topology)
    inside = np.zeros(len(topology.nodes), dtype=bool)
    inside[[fabric.index[m] for m in members]] = True
    kept, tried = [], set()
    for gpu_perm in (p for shape in _gpu_grids(topology) for p in _candidates(shape)):
        if gpu_perm.tobytes() in tried:
            continue
        tried.add(gpu_perm.tobytes())
        perm = fabric.extend(gpu_perm)
        if perm is not None and (inside[perm] == inside).all() and fabric.keeps(perm):
            kept.append(perm)
    return kept


def orbits(generators: Sequence[np.ndarray], n: int) -> np.ndarray:
    """The orbit (ids from 0, in order of first element) of each of ``0..n-1`` under the
    group the permutations ``generators`` generate: the parts its generators connect."""
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for g in generators:
        for x, y in enumerate(g.tolist()):
            a, b = root(x), root(y)
            if a != b:
                parent[max(a, b)] = min(a, b)
    _, ids = np.unique([root(x) for x in range(n)], return_inverse=True)
    return ids


def link_moves(topology: Topology, generators: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each node permutation of ``generators`` (automorphisms) as it moves the links:
    entry ``i``, the index in ``topology.links`` of the image of link ``i``."""
    index = {n.name: i for i, n in enumerate(topology.nodes)}
    n = len(topology.nodes)
    u = np.array([index[k.src] for k in topology.links], dtype=np.int64)
    v = np.array([index[k.dst] for k in topology.links], dtype=np.int64)
    code = np.full(n * n, -1, dtype=np.int64)
    code[u * n + v] = np.arange(len(u))
    return [code[g[u] * n + g[v]] for g in generators]
