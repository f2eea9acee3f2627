"""Route the flows of one phase through a FRED_m(P) by conflict-graph colouring (the FRED paper).

A :class:`Flow` reduces what arrives on its input ports and delivers the result to its
output ports. Routing is recursive, outer stage first:

1. conflict graph: one node per flow, an edge when two flows share an input µSwitch or
   an output µSwitch;
2. colour it with m colours; a flow's colour is the middle subnetwork it uses here;
3. an input (R) µSwitch reduces when both its inputs are one flow, an output (D)
   µSwitch broadcasts when both its outputs are;
4. recurse into each middle with the flows of its colour; a flow's ports there are the
   indices of the µSwitches it touched.

Colourings are enumerated exactly (backtracking, largest degree first, colour symmetry
broken because the middles are identical); when a middle cannot be routed the next
colouring is tried (up to ``MAX_COLOURINGS`` per level and ``MAX_TOTAL`` per call). If
none works the phase has a :class:`RoutingConflict`;
:func:`route_phases` resolves it by splitting the flows into more phases (first fit).

Modes of a 2-port element: ``reduce`` / ``broadcast`` when one flow uses both sides;
otherwise ``forward`` when side j goes to the lower colour first (input j → middle j
for a lone flow) and ``cross`` when not; the ``middle`` column is the exact setting.

>>> from te_ccl.fred.switch import build_fred
>>> sw = build_fred(4, 3, "s")
>>> r = route(sw, [Flow("ar", (0, 1, 2, 3), (0, 1, 2, 3))])
>>> r.colours["ar"], sorted({e.mode for e in r.elements})
((0,), ['broadcast', 'reduce', 'reduce-broadcast'])
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from te_ccl.errors import SpecError, VerificationError
from te_ccl.fred.ops import operation
from te_ccl.fred.switch import FredSwitch, MicroSwitch

__all__ = ["Flow", "ElementUse", "ElementSetting", "Routing", "RoutingConflict",
           "PhaseSplit", "route", "route_once", "route_phases", "check_ports"]

MAX_COLOURINGS = 512  # colourings tried per (sub)switch before declaring a conflict
MAX_TOTAL = 20_000  # colourings tried in one route() call (bounds the nested search)


@dataclass(frozen=True)
class Flow:
    """Reduce the data on ``inputs`` and deliver the sum to every port in ``outputs``."""

    id: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def operation(self) -> str:
        """What the switch does for it: allreduce, reduce, multicast or unicast."""
        return operation(len(set(self.inputs)), len(set(self.outputs)))


@dataclass(frozen=True)
class ElementUse:
    """How one flow crosses one µSwitch: selected inputs/outputs and middle (colour)."""

    flow: str
    input_sel: str
    output_sel: str
    colour: int | None


@dataclass(frozen=True)
class ElementSetting:
    """The configuration of one µSwitch in one phase."""

    element: MicroSwitch
    mode: str  # forward | cross | reduce | broadcast | reduce-broadcast
    uses: tuple[ElementUse, ...]


@dataclass(frozen=True)
class Routing:
    """A conflict-free routing: ``colours[flow]`` lists its middle at each level, outer first."""

    switch: FredSwitch
    flows: tuple[Flow, ...]
    colours: dict[str, tuple[int, ...]]
    # each routed (sub)switch with its flows and colours (None at a base element), the
    # flows named by position when ``names`` maps them to their ids
    plan: tuple[tuple[FredSwitch, tuple[Flow, ...], dict[str, int] | None], ...]
    names: dict[str, str] | None = field(default=None, compare=False)

    @cached_property
    def settings(self) -> tuple[ElementSetting, ...]:
        """The µSwitch settings of ``plan`` (flows named as there)."""
        return tuple(e for sw, fl, colour in self.plan for e in _settings(sw, fl, colour))

    @cached_property
    def elements(self) -> tuple[ElementSetting, ...]:
        """Every µSwitch setting, naming the flows by their ids. Built when first read:
        one routing serves every call with the same port pattern, and most callers only
        count phases."""
        if self.names is None:
            return self.settings
        ids = self.names
        return tuple(ElementSetting(e.element, e.mode, tuple(
            ElementUse(ids[u.flow], u.input_sel, u.output_sel, u.colour) for u in e.uses))
            for e in self.settings)

    def with_elements(self, elements: Sequence[ElementSetting]) -> Routing:
        """The same flows with other µSwitch settings (edited by hand, or broken on purpose
        to see the checks refuse them)."""
        out = replace(self)
        out.__dict__["elements"] = tuple(elements)  # what the cached property would hold
        return out


class RoutingConflict(VerificationError):
    """No m-colouring routes the flows; ``path`` is the (sub)switch where it failed."""

    def __init__(self, path: str, flows: Sequence[str], m: int) -> None:
        self.path = path
        self.flows = tuple(flows)
        super().__init__(f"conflict at {path}: flows {', '.join(self.flows)} "
                         f"cannot be routed with m={m}")


@dataclass(frozen=True)
class PhaseSplit:
    """The result of :func:`route_phases`: one routing per phase, and why it split."""

    phases: tuple[Routing, ...]
    conflicts: tuple[str, ...] = ()


@dataclass
class _Context:
    # the (sub)switches routed so far with their flows and colours; their element
    # settings are built once the whole search has succeeded
    routed: list[tuple[FredSwitch, tuple[Flow, ...], dict[str, int] | None]] = field(
        default_factory=list)
    colours: dict[str, list[int]] = field(default_factory=dict)
    failure: tuple[str, tuple[str, ...]] | None = None
    tries: int = 0


def check_ports(ports: int, flows: Sequence[Flow]) -> None:
    """Each port is at most one flow's input and one flow's output; ids unique; ports in range."""
    seen_in: dict[int, str] = {}
    seen_out: dict[int, str] = {}
    ids: set[str] = set()
    for f in flows:
        if f.id in ids:
            raise SpecError(f"flow id {f.id!r} used twice", key="flow")
        ids.add(f.id)
        if not f.inputs or not f.outputs:
            raise SpecError(f"flow {f.id} needs at least one input and one output port",
                            key="flow")
        for port, seen, what in [(p, seen_in, "input") for p in f.inputs] + \
                                [(p, seen_out, "output") for p in f.outputs]:
            if not 0 <= port < ports:
                raise SpecError(f"flow {f.id}: {what} port {port} outside 0..{ports - 1}",
                                key="flow")
            if port in seen and seen[port] != f.id:
                raise SpecError(f"port {port} is the {what} of flows {seen[port]} and {f.id}",
                                key="flow")
            seen[port] = f.id


def route(switch: FredSwitch, flows: Sequence[Flow]) -> Routing:
    """Route ``flows`` (one phase) through ``switch``.

    Raises
    ------
    SpecError
        If a port is used twice or is out of range.
    RoutingConflict
        If no colouring with ``switch.m`` colours routes every level.
    """
    flows = tuple(Flow(f.id, tuple(sorted(set(f.inputs))), tuple(sorted(set(f.outputs))))
                  for f in flows)
    check_ports(switch.ports, flows)
    ctx = _search(switch, flows)
    return Routing(switch, flows, {k: tuple(v) for k, v in ctx.colours.items()},
                   tuple(ctx.routed))


def _search(switch: FredSwitch, flows: tuple[Flow, ...]) -> _Context:
    """The colours of a routing of ``flows`` (ports checked); raises RoutingConflict."""
    ctx = _Context(colours={f.id: [] for f in flows})
    if not _route(switch, flows, ctx):
        path, names = ctx.failure or (switch.path, tuple(f.id for f in flows))
        raise RoutingConflict(path, names, switch.m)
    return ctx


def route_phases(switch: FredSwitch, flows: Sequence[Flow]) -> PhaseSplit:
    """Route ``flows`` in as few phases as first fit finds; report each split.

    The search depends only on the switch and the flows' ports in order, not on their
    ids, and 3D-parallel phases repeat the same port patterns on every switch, strategy
    and workload: it runs once per pattern (:func:`_split_pattern`) and each call
    relabels that result with its own flow ids.
    """
    flows, split = _pattern_split(switch, flows)
    ids = {str(i): f.id for i, f in enumerate(flows)}
    phases = tuple(_relabel(switch, r, flows, ids) for r in split.phases)
    if split.conflict is None:
        return PhaseSplit(phases)
    path, names, count = split.conflict
    whole = RoutingConflict(path, [ids[n] for n in names], switch.m)
    return PhaseSplit(phases, (f"{whole}; split into {count} phases",))


def route_once(switch: FredSwitch, flows: Sequence[Flow]) -> Routing:
    """Route ``flows`` in one phase, searching once per port pattern as
    :func:`route_phases` does.

    Raises
    ------
    SpecError
        If a port is used twice or is out of range.
    RoutingConflict
        Naming the flows (by id) of the (sub)switch where no colouring works.
    """
    flows, split = _pattern_split(switch, flows)
    ids = {str(i): f.id for i, f in enumerate(flows)}
    if split.conflict is not None:
        path, names, _ = split.conflict
        raise RoutingConflict(path, [ids[n] for n in names], switch.m)
    return _relabel(switch, split.phases[0], flows, ids)


def _pattern_split(switch: FredSwitch, flows: Sequence[Flow]) -> tuple[tuple[Flow, ...], _Split]:
    """The flows with sorted, de-duplicated ports (checked), and their pattern's split."""
    flows = tuple(Flow(f.id, tuple(sorted(set(f.inputs))), tuple(sorted(set(f.outputs))))
                  for f in flows)
    check_ports(switch.ports, flows)
    pattern = tuple((f.inputs, f.outputs) for f in flows)
    key = (switch.path, switch.ports, switch.m, switch.level, pattern)
    split = _PATTERNS.get(key)
    if split is None:
        if len(_PATTERNS) >= MAX_PATTERNS:
            _PATTERNS.clear()
        split = _PATTERNS[key] = _split_pattern(switch, pattern)
    return flows, split


MAX_PATTERNS = 4096  # routed port patterns kept (a whole evaluation uses a few hundred)


@dataclass(frozen=True)
class _Split:
    """A :class:`PhaseSplit` of flows named by position, and the conflict that split it
    (path, flow positions, phases) if any."""

    phases: tuple[Routing, ...]
    conflict: tuple[str, tuple[str, ...], int] | None = None


_PATTERNS: dict[tuple, _Split] = {}


def _split_pattern(switch: FredSwitch, pattern: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]
                   ) -> _Split:
    """First-fit phases of flows named ``"0"``, ``"1"``, … with the ports of ``pattern``."""
    flows = [Flow(str(i), ins, outs) for i, (ins, outs) in enumerate(pattern)]
    try:
        return _Split((route(switch, flows),))
    except RoutingConflict as whole:
        groups: list[list[Flow]] = []
        for f in flows:
            for g in groups:
                try:
                    _search(switch, (*g, f))
                except RoutingConflict:
                    continue
                g.append(f)
                break
            else:
                groups.append([f])  # a lone flow always routes
        return _Split(tuple(route(switch, g) for g in groups),
                      (whole.path, whole.flows, len(groups)))


def _relabel(switch: FredSwitch, r: Routing, flows: tuple[Flow, ...], ids: dict[str, str]
             ) -> Routing:
    """``r`` (flows named by position) with the ids of ``flows``."""
    mine = tuple(flows[int(f.id)] for f in r.flows)
    out = Routing(switch, mine, {ids[k]: v for k, v in r.colours.items()}, r.plan, ids)
    out.__dict__["settings"] = r.settings  # the same plan: its settings, built once
    return out


def _route(sw: FredSwitch, flows: tuple[Flow, ...], ctx: _Context) -> bool:
    if sw.base is not None:
        if flows:
            ctx.routed.append((sw, flows, None))
        return True
    in_el = {f.id: {sw.element_of_port(p) for p in f.inputs} for f in flows}
    out_el = {f.id: {sw.element_of_port(p) for p in f.outputs} for f in flows}
    adj = _conflicts(flows, in_el, out_el, sw.r)
    # this level and the ones below colour only these flows: roll back only theirs
    mark = (len(ctx.routed), {f.id: len(ctx.colours[f.id]) for f in flows})
    for n, colouring in enumerate(_colourings(adj, sw.m)):
        ctx.tries += 1
        if n >= MAX_COLOURINGS or ctx.tries > MAX_TOTAL:
            break
        colour = {f.id: colouring[i] for i, f in enumerate(flows)}
        if all(_route(mid, tuple(Flow(f.id, tuple(sorted(in_el[f.id])),
                                      tuple(sorted(out_el[f.id])))
                                 for f in flows if colour[f.id] == c), ctx)
               for c, mid in enumerate(sw.middles)):
            for f in flows:
                ctx.colours[f.id].insert(mark[1][f.id], colour[f.id])
            ctx.routed.append((sw, flows, colour))
            return True
        _rollback(ctx, mark)
    if ctx.failure is None or ctx.failure[0].count("/") < sw.path.count("/"):
        ctx.failure = (sw.path, tuple(f.id for f in flows))
    return False


def _rollback(ctx: _Context, mark: tuple[int, dict[str, int]]) -> None:
    del ctx.routed[mark[0]:]
    for k, n in mark[1].items():
        del ctx.colours[k][n:]


def _conflicts(flows: tuple[Flow, ...], in_el: dict[str, set[int]],
               out_el: dict[str, set[int]], r: int) -> list[set[int]]:
    """Adjacency of the conflict graph (DEMUX/MUX index ``r`` carries one port: never shared)."""
    adj: list[set[int]] = [set() for _ in flows]
    for i, a in enumerate(flows):
        for j in range(i + 1, len(flows)):
            b = flows[j]
            shared_in = {e for e in in_el[a.id] & in_el[b.id] if e < r}
            shared_out = {e for e in out_el[a.id] & out_el[b.id] if e < r}
            if shared_in or shared_out:
                adj[i].add(j)
                adj[j].add(i)
    return adj


def _colourings(adj: list[set[int]], m: int) -> Iterator[list[int]]:
    """Every proper m-colouring up to a permutation of colours, largest degree first
    (backtracking with an explicit stack: a phase may hold thousands of flows)."""
    order = sorted(range(len(adj)), key=lambda v: -len(adj[v]))
    n = len(order)
    colour = [-1] * len(adj)
    used = [0] * (n + 1)  # colours used by the first k vertices of ``order``
    try_next = [0] * (n + 1)  # the next colour to try at position k
    k = 0
    while k >= 0:
        if k == n:
            yield list(colour)
            k -= 1
            continue
        v = order[k]
        colour[v] = -1
        c, limit = try_next[k], min(m, used[k] + 1)
        while c < limit and any(colour[u] == c for u in adj[v]):
            c += 1
        if c < limit:
            colour[v], try_next[k] = c, c + 1
            used[k + 1], try_next[k + 1] = max(used[k], c + 1), 0
            k += 1
        else:
            try_next[k] = 0
            k -= 1


def _sel(sides: Sequence[int]) -> str:
    return "+".join(str(s) for s in sorted(sides))


def _two_port_mode(by_side: dict[int, tuple[str, int]], merge: str) -> str:
    """Mode of a 2-port element from side → (flow, target side/colour)."""
    if len(by_side) == 2:
        if by_side[0][0] == by_side[1][0]:
            return merge
        return "forward" if by_side[0][1] < by_side[1][1] else "cross"
    ((side, (_, target)),) = by_side.items()
    return "forward" if side == target else "cross"


def _settings(sw: FredSwitch, flows: tuple[Flow, ...], colour: dict[str, int] | None
              ) -> list[ElementSetting]:
    """The element settings of one routed (sub)switch: its base element, or its stages."""
    if sw.base is not None:
        return [_base_setting(sw.base, flows)]
    return _stage_settings(sw, flows, colour or {})


def _stage_settings(sw: FredSwitch, flows: tuple[Flow, ...],
                    colour: dict[str, int]) -> list[ElementSetting]:
    """Settings of the input, output, DEMUX and MUX elements of ``sw`` at this level."""
    out: list[ElementSetting] = []
    for ports_of, elements, io, merge in ((lambda f: f.inputs, sw.inputs, "in", "reduce"),
                                          (lambda f: f.outputs, sw.outputs, "out", "broadcast")):
        at: dict[int, dict[int, tuple[str, int]]] = defaultdict(dict)  # element → side → use
        for f in flows:
            for p in ports_of(f):
                if p < 2 * sw.r:
                    at[p // 2][p % 2] = (f.id, colour[f.id])
        for el in elements:
            by_side = at.get(el.index)
            if not by_side:
                continue
            uses = []
            for fid in dict.fromkeys(f for f, _ in by_side.values()):
                sides = _sel([s for s, (g, _) in by_side.items() if g == fid])
                mid = f"mid{colour[fid]}"
                uses.append(ElementUse(fid, sides, mid, colour[fid]) if io == "in"
                            else ElementUse(fid, mid, sides, colour[fid]))
            out.append(ElementSetting(el, _two_port_mode(by_side, merge), tuple(uses)))
    last = sw.ports - 1
    for el, ports_of in ((sw.demux, lambda f: f.inputs), (sw.mux, lambda f: f.outputs)):
        for f in flows:
            if el is not None and last in ports_of(f):
                mid = f"mid{colour[f.id]}"
                use = (ElementUse(f.id, "0", mid, colour[f.id]) if el is sw.demux
                       else ElementUse(f.id, mid, "0", colour[f.id]))
                out.append(ElementSetting(el, "forward", (use,)))
    return out


def _base_setting(el: MicroSwitch, flows: tuple[Flow, ...]) -> ElementSetting:
    """The 2×2 RD element: reduce, broadcast, both, or a plain forward/cross crossbar."""
    uses = tuple(ElementUse(f.id, _sel(f.inputs), _sel(f.outputs), None) for f in flows)
    both_in = any(len(f.inputs) == 2 for f in flows)
    both_out = any(len(f.outputs) == 2 for f in flows)
    if both_in and both_out:
        mode = "reduce-broadcast"
    elif both_in:
        mode = "reduce"
    elif both_out:
        mode = "broadcast"
    else:
        crossed = any(f.inputs[0] != f.outputs[0] for f in flows)
        mode = "cross" if crossed else "forward"
    return ElementSetting(el, mode, uses)
