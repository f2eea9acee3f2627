"""Happens-before between accesses of one GPU, exact and cheap at 1024 GPUs.

Ordering edges (see :mod:`.execute`): program order within a thread block, flag waits
(the waiter comes after the publisher's transmission that first satisfied it) and
send → receive of one message. The two accesses of a race question are always on one
GPU, but the path that orders them may leave the GPU and come back (data sent around a
ring). Full vector clocks answer that, at O(all thread blocks) per transmission:
O(steps × thread blocks), hours for a 1024-GPU file. So two tiers, exact together:

* **Local clocks.** Each thread block keeps a vector clock over the thread blocks of
  *its own GPU*, joined on flag waits only: O(thread blocks per GPU) per wait. Its edges
  are a subset of the real ones, so when it orders two accesses they are ordered.
* **The recorded graph.** Every fired transmission is a node that knows its
  predecessors (the block's previous node, the message's sender, the flag publishers).
  When the local clock does not order a pair, a backward search from the later access
  decides exactly. It visits only nodes fired after the earlier access (firing order is
  a topological order). Valid files rarely need it (none of the reference files or
  lowering outputs did); a racy chunk is searched until its race is reported, once.

Nodes are numbered in firing order, and a clock entry is the number of the latest node
of that block known to come before (-1: none). A block's nodes are numbered in its
program order, so "the ``k``-th transmission of ``x`` is ordered before" is
``clock[x] >= node`` with no separate per-block counter. A block's clock is allocated at
its first wait, and publications of local clocks are kept only while some waiter still
needs them. A publication holds its block's clock itself, not a copy: the block copies
its clock only to change it while a publication still holds it (one fire in ten at
1024 GPUs; the waiters mostly take a publication before its block fires again).
"""

from __future__ import annotations

from array import array

import numpy as np
from numpy import maximum

__all__ = ["HappensBefore"]


class HappensBefore:
    """Local clocks and the graph of fired transmissions; blocks are numbered 0..n-1.

    ``local[b]`` is block ``b``'s index among the blocks of its GPU, ``width[b]`` the
    number of blocks on that GPU, ``waits[b]`` maps each flag value others wait for on
    ``b`` to the number of such waits. ``last[b]`` is the node of ``b``'s current (last
    fired) transmission, -1 before its first.
    """

    def __init__(self, local: list[int], width: list[int],
                 waits: list[dict[int, int]]) -> None:
        self.local = local
        self.last = [-1] * len(local)
        unset = {w: np.full(w, -1, np.int32) for w in set(width)}
        self.clock = [unset[w] for w in width]      # shared until the block's first join
        # 1 where a block may change its clock in place: not the shared initial one, nor
        # one a publication still holds
        self._own = bytearray(len(local))
        self._left = waits
        self._wanted = [sorted(w) for w in waits]
        self._next = [0] * len(local)
        # per block, flag value -> [clock, node, flag values it is still published under]
        self._pubs: list[dict[int, list]] = [{} for _ in local]
        self._block = array("i")                      # node -> block
        self._prev = array("i")                       # node -> block's previous node or -1
        self._msg = array("i")                        # node -> sender's node or -1
        self._dep = array("i")                        # node -> a flag publisher's node or -1
        self._deps: dict[int, tuple[int, ...]] = {}   # node -> all of them, where several
        self._memo: tuple[int, dict[int, list[int]]] = (-1, {})  # searches from one node

    def fire(self, b: int, waits: tuple[tuple[int, int], ...], msg_node: int,
             flag: int) -> int:
        """Start block ``b``'s next transmission (waits: ``(target block, flag)``, the
        message's sending node or -1) and publish its ``flag`` (-1: none); its node.

        Publishing at the start is publishing at the end: the transmission's own accesses
        never consult the publication, and no other block fires in between. Waiters on
        ``<= flag`` not yet satisfied are ordered after this node."""
        node = len(self._block)
        clock = self.clock[b]
        own = self._own
        dep = -1
        if waits:
            publishers: tuple[int, ...] = ()
            for target, value in waits:
                pubs = self._pubs[target]
                entry = pubs.get(value)
                if entry is None:
                    continue
                if own[b]:
                    maximum(clock, entry[0], out=clock)
                else:  # the join is the copy
                    self.clock[b] = clock = maximum(clock, entry[0])
                    own[b] = 1
                publishers += (entry[1],)
                left = self._left[target]
                left[value] -= 1
                if not left[value]:
                    del pubs[value]
                    entry[2] -= 1
                    if not entry[2] and entry[0] is self.clock[target]:
                        own[target] = 1  # no publication holds the clock any more
            if publishers:
                dep = publishers[0]
                if len(publishers) > 1:
                    self._deps[node] = publishers
        last = self.last
        self._block.append(b)
        self._prev.append(last[b])
        self._msg.append(msg_node)
        self._dep.append(dep)
        last[b] = node
        if flag >= 0:
            wanted, i = self._wanted[b], self._next[b]
            if i < len(wanted) and wanted[i] <= flag:
                if not own[b]:  # copied only while a publication still holds it
                    self.clock[b] = clock = clock.copy()
                clock[self.local[b]] = node
                own[b] = 0
                entry = [clock, node, 0]
                pubs = self._pubs[b]
                while i < len(wanted) and wanted[i] <= flag:
                    pubs[wanted[i]] = entry
                    entry[2] += 1
                    i += 1
                self._next[b] = i
        return node

    def ordered(self, b: int, other: int, node: int) -> bool:
        """Does ``other``'s transmission ``node`` happen before ``b``'s current one?"""
        if other == b or self.clock[b][self.local[other]] >= node:
            return True
        return self.reaches(other, node, self.last[b])

    def reaches(self, x: int, start: int, node: int) -> bool:
        """Is a node of block ``x`` from node ``start`` on an ancestor of ``node``?
        Remembers, per block, the latest start found and the earliest start not found
        (a transmission of ``cnt`` chunks asks up to ``cnt`` times)."""
        if self._memo[0] != node:
            self._memo = (node, {})
        known = self._memo[1].setdefault(x, [-1, len(self._block)])
        if start <= known[0] or start >= known[1]:
            return start <= known[0]
        found = self._search(x, start, node)
        known[0 if found else 1] = start
        return found

    def _search(self, x: int, start: int, node: int) -> bool:
        blocks, prev, msg, dep, deps = self._block, self._prev, self._msg, self._dep, self._deps
        stack, seen = [node], set()
        while stack:
            w = stack.pop()
            if w < start or w in seen:
                continue
            seen.add(w)
            if blocks[w] == x:
                return True
            if prev[w] >= 0:
                stack.append(prev[w])
            if msg[w] >= 0:
                stack.append(msg[w])
            if w in deps:
                stack.extend(deps[w])
            elif dep[w] >= 0:
                stack.append(dep[w])
        return False
