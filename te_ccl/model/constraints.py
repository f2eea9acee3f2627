"""The constraint families of the time-expanded model, one function each.

Notation: ``x[c,l,t]`` transfer starts (see :mod:`te_ccl.model.ten`), ``arr(c,n,t) =
Σ_{l=(u,n)} x[c,l,t-d_l] + pending(c,n,t)`` arrivals, ``out(c,n,t) = Σ_{l=(n,w)} x[c,l,t]``.
Extra variables: ``h[c,n,t] ∈ {0,1}`` "n holds c in epoch t" (copying nodes with a
buffer), ``s[c,n,t] ∈ ℕ`` units of c stored at n (non-copying nodes with a buffer),
``r[c,n] ∈ {0,1}`` "GPU n relays c" (buffer limits).

(1) capacity   Σ_c Σ_{s=t-k_l+1..t} x[c,l,s] ≤ cap_l              ∀ l, t
(2) hold       h[c,n,t] ≤ h[c,n,t-1] + arr(c,n,t);  x[c,(n,w),t] ≤ h[c,n,t]
               (copy node with buffer; h[c,n,-1] = 1 iff n holds c at epoch 0)
(3) cut-through x[c,(n,w),t] ≤ arr(c,n,t)        (copy node without buffer: same epoch)
(4) conserve   s[c,n,t] = s[c,n,t-1] + arr(c,n,t) − out(c,n,t) ≥ 0   (no copy, buffer)
(5) route      out(c,n,t) ≤ arr(c,n,t)            (no copy, no buffer); in tree mode also ≤ 1
(6) demand     Σ_t arr(c,v,t) ≥ 1                  ∀ unmet destination v of c, t ≤ H
(7) tree       Σ_t arr(c,n,t) ≤ 1                  ∀ copy node n (reductions only)
(8) relay      x[c,(u,n),t] ≤ r[c,n];  Σ_c r[c,n] ≤ ⌊buffer_n / C⌋   (GPU with a buffer limit)
(10) finish    f[j] ≥ Σ_t t·arr(c,v,t)            ∀ chunk c of job j, unmet destination
               (or root) v: ``f[j]`` (key ``("f", j)``) bounds job j's finish epoch
               (several jobs in one problem; the sum exceeds the first arrival only where
               a chunk arrives twice, which the objective removes)
(9) reduce     for a chunk with a reduction (partials ``y``, completion ``z`` at the root):
               every source but the root sends its partial once, Σ y_out(n) = 1; any other
               node sends once if it received, y_arr ≤ Σ y_out(n) ≤ min(1, Σ y_arr);
               a partial arriving in epoch e waits for the node's one send, at epoch ≥ e
               (buffer) or = e (no buffer), or at the root for its completion:
               Σ_t z[c,t] = 1 and y_arr(e) ≤ Σ_{t ≥ e} z (buffer) or z[c,e] (no buffer);
               a switch that cannot add partials forwards each apart (as in (4)/(5), and
               without buffer at most one per epoch).
               Each send moves strictly later, so every partial ends at the root, once.

A row is ``(terms, lo, hi)`` with ``terms`` a list of ``(variable key, coefficient)``
and ``None`` for a missing bound; constants are moved into the bounds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from te_ccl.model.relays import forced_relays
from te_ccl.model.ten import TimeExpandedNetwork

__all__ = ["Row", "capacity", "hold", "cut_through", "conserve", "route", "demand", "tree",
           "relay", "reduce", "finish"]

Term = tuple[tuple, int]
Row = tuple[list[Term], int | None, int | None]


def _arr(ten: TimeExpandedNetwork, c: int, n: str, t: int, coef: int = 1) -> list[Term]:
    return [(k, coef) for k in ten.arrivals.get((c, n, t), ())]


def capacity(ten: TimeExpandedNetwork) -> Iterator[Row]:
    """(1) at most ``cap`` starts in any ``k`` consecutive epochs (starts before 0 included)."""
    busy: dict[tuple[str, str], list[int]] = {}
    for key, t in ten.problem.state.busy:
        busy.setdefault(key, []).append(t)
    for key, by_epoch in ten.per_link.items():
        lt = ten.problem.timings[key]
        for t in range(min(by_epoch), max(by_epoch) + lt.occupancy):
            window = range(t - lt.occupancy + 1, t + 1)
            terms = [(x, 1) for s in window for x in by_epoch.get(s, ())]
            before = sum(1 for s in busy.get(key, ()) if s in window)
            if len(terms) + before > lt.capacity:
                yield terms, None, lt.capacity - before


def _arr_until(ten: TimeExpandedNetwork, c: int, n: str, t: int, first: bool) -> tuple[list[Term], int]:
    """Arrivals (negated) and pending count in epoch ``t``, or in all epochs ≤ t when ``first``."""
    epochs = range(t + 1) if first else (t,)
    terms = [term for e in epochs for term in _arr(ten, c, n, e, -1)]
    return terms, sum(ten.pending.get((c, n, e), 0) for e in epochs)


def hold(ten: TimeExpandedNetwork, node_ok) -> Iterator[Row]:
    """(2) a copying node with a buffer sends copies of what it has held since some arrival."""
    p = ten.problem
    for c, senders in ten.sender_nodes.items():
        for n in senders:
            if not node_ok(n) or p.holds(c, n):
                continue
            prev = None
            for t in ten.sender_nodes[c][n]:
                h = ("h", c, n, t)
                arr, pending = _arr_until(ten, c, n, t, prev is None)
                yield [(h, 1)] + arr + ([(prev, -1)] if prev else []), None, pending
                for x in ten.sends.get((c, n, t), ()):
                    yield [(x, 1), (h, -1)], None, 0
                prev = h


def cut_through(ten: TimeExpandedNetwork, node_ok) -> Iterator[Row]:
    """(3) a copying switch without buffer sends copies only of what arrives in that epoch."""
    for (c, n, t), xs in ten.sends.items():
        if node_ok(n):
            for x in xs:
                yield [(x, 1)] + _arr(ten, c, n, t, -1), None, ten.pending.get((c, n, t), 0)


def conserve(ten: TimeExpandedNetwork, node_ok) -> Iterator[Row]:
    """(4) a non-copying node with a buffer sends each unit it received at most once."""
    p = ten.problem
    for c, senders in ten.sender_nodes.items():
        for n in senders:
            if not node_ok(n):
                continue
            prev, start = None, 1 if p.holds(c, n) else 0
            for t in ten.sender_nodes[c][n]:
                s = ("s", c, n, t)
                out = [(x, 1) for x in ten.sends.get((c, n, t), ())]
                arr, pending = _arr_until(ten, c, n, t, prev is None)
                terms = [(s, 1)] + out + arr + ([(prev, -1)] if prev else [])
                rhs = pending + (0 if prev else start)
                yield terms, rhs, rhs
                prev = s


def route(ten: TimeExpandedNetwork, node_ok) -> Iterator[Row]:
    """(5) a switch that neither copies nor stores forwards at most what arrives, in that epoch."""
    for (c, n, t), xs in ten.sends.items():
        if node_ok(n):
            out = [(x, 1) for x in xs]
            yield out + _arr(ten, c, n, t, -1), None, ten.pending.get((c, n, t), 0)
            if ten.problem.tree and len(out) > 1:
                yield out, None, 1


def _all_arrivals(ten: TimeExpandedNetwork, c: int, n: str) -> tuple[list[Term], int]:
    terms = [(x, 1) for t in range(ten.horizon + 1) for x in ten.arrivals.get((c, n, t), ())]
    return terms, sum(ten.pending.get((c, n, t), 0) for t in range(ten.horizon + 1))


def demand(ten: TimeExpandedNetwork) -> Iterator[Row]:
    """(6) every unmet destination receives its chunk by epoch H."""
    for d in ten.problem.demands:
        for v in ten.unmet(d):
            terms, pending = _all_arrivals(ten, d.chunk, v)
            yield terms, 1 - pending, None


def tree(ten: TimeExpandedNetwork) -> Iterator[Row]:
    """(7) reductions: a copying node receives each chunk once, so reversed it sends one partial."""
    p = ten.problem
    for d in p.demands:
        for n in p.copy_nodes:
            if not p.holds(d.chunk, n):
                terms, pending = _all_arrivals(ten, d.chunk, n)
                if len(terms) + pending > 1:
                    yield terms, None, 1 - pending


def relay(ten: TimeExpandedNetwork) -> Iterator[Row]:
    """(8) a GPU with a buffer limit relays at most ⌊buffer/C⌋ chunks (never evicted), and
    the chunks it must still relay (:func:`~te_ccl.model.relays.forced_relays`) keep their
    slots from the others: a model of part of the schedule (a round) must not spend them."""
    p = ten.problem
    already = dict(p.state.relayed)
    forced = forced_relays(p) if p.relay_limit else {}
    relays: dict[str, set] = {}
    for d in p.demands:
        for n in p.relay_limit:
            if n in d.sources or n in d.destinations or p.holds(d.chunk, n):
                continue
            terms, _ = _all_arrivals(ten, d.chunk, n)
            for x, _ in terms:
                yield [(x, 1), (("r", d.chunk, n), -1)], None, 0
            if terms:
                relays.setdefault(n, set()).add(("r", d.chunk, n))
    for n, rs in relays.items():
        room = p.relay_limit[n] - already.get(n, 0)
        yield [(r, 1) for r in sorted(rs)], None, room
        # the chunks ``n`` must still relay keep their slots from the others
        must = forced.get(n, set())
        others = sorted(r for r in rs if r[1] not in must)
        if must and others:
            yield [(r, 1) for r in others], None, room - len(must)


def reduce(ten: TimeExpandedNetwork) -> Iterator[Row]:
    """(9) partials travel as an in-tree into the root, each node sending its sum once."""
    p = ten.problem
    merges = p.merge_nodes
    sends: dict[tuple[int, str], list[tuple]] = defaultdict(list)
    arrivals: dict[tuple[int, str], list[tuple[tuple, int]]] = defaultdict(list)
    for key in ten.y:
        _, c, (u, v), t = key
        sends[(c, u)].append(key)
        arrivals[(c, v)].append((key, t + p.timings[(u, v)].delay))
    for c, r in p.reductions.items():
        done = ten.completion.get(c)
        if done is None:
            continue
        nodes = set(r.sources) | {n for (k, n) in sends if k == c} | \
            {n for (k, n) in arrivals if k == c}
        for n in sorted(nodes):
            arr, buffered = arrivals.get((c, n), []), n in p.buffered_nodes
            if n not in merges:
                yield from _relay_units(sends.get((c, n), []), arr, buffered)
                continue
            if n == r.root:
                waits = [(("z", c, t), t) for t in done]
                yield [(z, 1) for z, _ in waits], 1, 1
            else:
                waits = [(y, y[3]) for y in sends.get((c, n), [])]
                out = [(y, 1) for y, _ in waits]
                if n in r.sources:
                    yield out, 1, 1
                else:
                    yield out + [(a, -1) for a, _ in arr], None, 0
                    if len(out) > 1:
                        yield out, None, 1
            for a, e in arr:
                later = [(w, -1) for w, t in waits if (t >= e if buffered else t == e)]
                yield [(a, 1)] + later, None, 0


def _relay_units(sends: list[tuple], arr: list[tuple[tuple, int]], buffered: bool
                 ) -> Iterator[Row]:
    """A switch that cannot add partials forwards each one apart: in the epoch it arrives
    and one per epoch (no buffer), or each once, no earlier than it arrived (buffer)."""
    epochs = sorted({y[3] for y in sends} | {e for _, e in arr})
    for t in epochs:
        now = [(y, 1) for y in sends if (y[3] <= t if buffered else y[3] == t)]
        came = [(a, -1) for a, e in arr if (e <= t if buffered else e == t)]
        yield now + came, (None if buffered else 0), 0
        if not buffered and len(came) > 1:
            yield [(a, 1) for a, _ in came], None, 1
    if buffered:
        yield [(y, 1) for y in sends] + [(a, -1) for a, _ in arr], 0, 0


def finish(ten: TimeExpandedNetwork) -> Iterator[Row]:
    """(10) each job's finish epoch is no earlier than any delivery of its chunks."""
    p = ten.problem
    for d in p.demands:
        job = p.owners.get(d.chunk)
        if job is None:
            continue
        ends = list(ten.unmet(d))
        if d.chunk in p.reductions:
            ends.append(p.reductions[d.chunk].root)
        for v in ends:
            terms = [(x, -t) for t in range(1, ten.horizon + 1)
                     for x in ten.arrivals.get((d.chunk, v, t), ())]
            pending = sum(t * ten.pending.get((d.chunk, v, t), 0)
                          for t in range(ten.horizon + 1))
            if terms or pending:
                yield [(("f", job), 1)] + terms, pending, None
