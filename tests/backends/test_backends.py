"""Every backend on a matrix of tiny topologies × collectives, through the independent checker."""

from __future__ import annotations

import pytest

from te_ccl.backends.base import SolveParams
from te_ccl.backends.cpsat import solve_formulation
from te_ccl.backends.linear import solve_relaxation
from te_ccl.backends.select import choose_backend
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import solve
from te_ccl.errors import SpecError
from te_ccl.model import build_problem, formulate
from te_ccl.topology import Link, Node, NodeKind, Topology
from te_ccl.verify.schedule_check import check_schedule

BACKENDS = ("milp", "lp", "rounds")


def ring(n: int) -> Topology:
    links = []
    for i in range(n):
        j = (i + 1) % n
        links += [Link(f"g{i}", f"g{j}", 2e9, 1e-7), Link(f"g{j}", f"g{i}", 1e9, 1e-7)]
    return Topology.build(f"ring{n}", [Node(f"g{i}") for i in range(n)], links)


def switched(n: int, copy: bool, reduce: bool) -> Topology:
    nodes = [Node(f"g{i}") for i in range(n)]
    nodes.append(Node("sw", NodeKind.SWITCH, can_copy=copy, can_reduce=reduce))
    links = [Link(f"g{i}", "sw", 1e9, 2e-7) for i in range(n)]
    links += [Link("sw", f"g{i}", 1e9, 2e-7) for i in range(n)]
    links += [Link("g0", "g1", 1e9), Link("g1", "g0", 1e9)]
    return Topology.build("sw", nodes, links)


TOPOLOGIES = {"ring4": ring(4), "switch": switched(3, False, False),
              "fred": switched(3, True, True)}
KINDS = [("allgather", None), ("broadcast", 1), ("alltoall", None), ("gather", 0),
         ("scatter", 2), ("reducescatter", None), ("allreduce", None), ("reduce", 0)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("topo", sorted(TOPOLOGIES))
@pytest.mark.parametrize("kind, root", KINDS)
def test_matrix_passes_the_checker(backend, topo, kind, root):
    t = TOPOLOGIES[topo]
    ranks = tuple(range(3))
    c = Collective(CollectiveKind(kind), 3 * 4000, ranks, 1, root=root)
    s = solve(t, c, SolveParams(backend=backend, time_limit_s=10))
    assert check_schedule(s) == []
    assert s.info.backend == backend or (backend == "lp" and c.is_reduction)


@pytest.mark.slow
def test_lp_relaxation_is_below_the_milp():
    p = build_problem(ring(4), Collective(CollectiveKind.ALLGATHER, 8000, (0, 1, 2, 3), 2))
    for h in range(1, 6):
        form = formulate(p, h)
        milp = solve_formulation(form, SolveParams(), 10, with_objective=True)
        status, _, lp_value = solve_relaxation(form, 10, with_objective=True)
        if milp.status == "optimal":
            assert status == "optimal"
            milp_value = sum(form.objective[k] for k in milp.chosen)
            assert lp_value <= milp_value + 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_seed_same_schedule(backend):
    c = Collective(CollectiveKind.ALLGATHER, 8000, (0, 1, 2, 3), 2)
    p = SolveParams(backend=backend, time_limit_s=10, seed=7, threads=2)
    assert solve(ring(4), c, p).transfers == solve(ring(4), c, p).transfers


def test_the_flow_model_says_which_solver_its_size_picked():
    from te_ccl.compiler.strategy import run_strategy

    c = Collective(CollectiveKind.ALLGATHER, 4000, (0, 1, 2, 3))
    s = run_strategy(ring(4), c, SolveParams(time_limit_s=10))
    assert s.info.backend == "milp"
    assert any(n.startswith("auto: milp") for n in s.info.notes)
    def pick(chunks: int) -> str:
        c = Collective(CollectiveKind.ALLTOALL, 4 << 20, (0, 1, 2, 3), chunks)
        return choose_backend(build_problem(ring(4), c))[0]

    assert [pick(4), pick(6), pick(12)] == ["milp", "lp", "rounds"]


def test_unknown_backend_is_a_spec_error():
    with pytest.raises(SpecError, match="backend"):
        SolveParams(backend="gurobi")


def test_solvers_print_nothing_on_stdout(capfd):
    # `teccl compile --json` owns stdout: HiGHS's banner and solver logs must stay off it
    c = Collective(CollectiveKind.ALLGATHER, 8000, (0, 1, 2, 3), 2)
    for backend in BACKENDS:
        solve(ring(4), c, SolveParams(backend=backend, time_limit_s=10))
    assert capfd.readouterr().out == ""


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_horizon_too_short_is_a_solver_error(backend):
    from te_ccl.errors import SolverError

    c = Collective(CollectiveKind.ALLGATHER, 8000, (0, 1, 2, 3), 2)
    with pytest.raises(SolverError, match="infeasible.*horizon 2 epochs"):
        solve(ring(4), c, SolveParams(backend=backend, time_limit_s=10, max_horizon=2))
