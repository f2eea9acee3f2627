"""``teccl sweep``: compile a whole algorithm library from a grid, locally or on Ray.

One direction of flow: :mod:`~te_ccl.sweep.grid` (validated ``GRID.yaml``) →
:mod:`~te_ccl.sweep.points` (points with content keys) → :mod:`~te_ccl.sweep.executors`
(each point through :func:`~te_ccl.sweep.run.run_point`) → :mod:`~te_ccl.sweep.store`
(XML, records, ``index.csv``, per-topology MSCCL directories); :mod:`~te_ccl.sweep.driver`
ties them together. Submodules are imported on demand, so ``teccl --help`` stays fast.
"""
