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

Which transmission a wait takes its publication from is known before anything runs (a
block's flags only grow: the first of its transmissions that publishes a flag at least
the awaited value), so publications are numbered in advance and kept in flat lists by
number, with the number of waits each still has to serve: no dictionary per block.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

import numpy as np
from numpy import maximum

__all__ = ["HappensBefore"]


class HappensBefore:
    """Local clocks and the graph of fired transmissions; blocks are numbered 0..n-1.

    ``local[b]`` is block ``b``'s index among the blocks of its GPU, ``width[b]`` the
    number of blocks on that GPU, ``waits[p]`` the number of waits publication ``p``
    serves (publications are numbered by the caller, one per transmission that
    publishes a flag). ``last[b]`` is the node of ``b``'s current (last fired)
    transmission, -1 before its first. ``fire(b, joins, msg_node, pub)`` (see
    :meth:`_firing`) starts a transmission.
    """

    def __init__(self, local: list[int], width: list[int], waits: array) -> None:
        self.local = local
        self.last = [-1] * len(local)
        unset = {w: np.full(w, -1, np.int32) for w in set(width)}
        self.clock = [unset[w] for w in width]      # shared until the block's first join
        # 1 where a block may change its clock in place: not the shared initial one, nor
        # one a publication still holds
        self._own = bytearray(len(local))
        self._left = waits                            # publication -> waits still to serve
        self._pub: list[np.ndarray | None] = [None] * len(waits)  # its clock, while needed
        self._pub_node = array("i", [-1]) * len(waits)
        self._pub_block = array("i", [-1]) * len(waits)
        self._block = array("i")                      # node -> block
        self._prev = array("i")                       # node -> block's previous node or -1
        self._msg = array("i")                        # node -> sender's node or -1
        self._dep = array("i")                        # node -> a flag publisher's node or -1
        self._deps: dict[int, tuple[int, ...]] = {}   # node -> all of them, where several
        self._memo: tuple[int, dict[int, list[int]]] = (-1, {})  # searches from one node
        self.fire = self._firing()

    def _firing(self) -> Callable[[int, tuple[int, ...], int, int], int]:
        """:meth:`fire`, as a closure over the state it changes (once per transmission:
        its lookups are local, not attributes)."""
        clocks, own, pubs, left = self.clock, self._own, self._pub, self._left
        pub_node, pub_block, deps, last, local = (self._pub_node, self._pub_block,
                                                  self._deps, self.last, self.local)
        blocks = self._block
        add_block, add_prev, add_msg, add_dep = (blocks.append, self._prev.append,
                                                 self._msg.append, self._dep.append)

        def fire(b: int, joins: tuple[int, ...], msg_node: int, pub: int) -> int:
            """Start block ``b``'s next transmission, which waits for the publications
            ``joins`` (those not made yet were met without them: a flag value below any
            published) and whose message was sent by node ``msg_node`` (-1: none), and
            make publication ``pub`` (-1: none; not made if nothing waits for it); its
            node.

            Publishing at the start is publishing at the end: the transmission's own
            accesses never consult the publication, and no other block fires in between."""
            node = len(blocks)
            clock = clocks[b]
            dep = -1
            for p in joins:
                held = pubs[p]
                if held is None:
                    continue
                if own[b]:
                    maximum(clock, held, out=clock)
                else:  # the join is the copy
                    clocks[b] = clock = maximum(clock, held)
                    own[b] = 1
                if dep < 0:
                    dep = pub_node[p]
                else:
                    deps[node] = deps.get(node, (dep,)) + (pub_node[p],)
                n = left[p] - 1
                left[p] = n
                if not n:
                    pubs[p] = None
                    target = pub_block[p]
                    if held is clocks[target]:
                        own[target] = 1  # no publication holds the clock any more
            add_block(b)
            add_prev(last[b])
            add_msg(msg_node)
            add_dep(dep)
            last[b] = node
            if pub >= 0 and left[pub]:  # made only if awaited
                if not own[b]:  # copied only while a publication still holds it
                    clocks[b] = clock = clock.copy()
                clock[local[b]] = node
                own[b] = 0
                pubs[pub] = clock
                pub_node[pub] = node
                pub_block[pub] = b
            return node

        return fire

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
