"""Development tools: the benchmark and the shipped schedules (not part of the installed package).

Run from the repository root: ``python -m devtools.bench [SUITE]`` and
``python -m devtools.ship_schedules DIR`` (``make bench``, ``make schedules``).
"""
