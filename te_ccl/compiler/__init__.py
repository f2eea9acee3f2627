"""The compiler: from a checked topology and collective to a verified file.

Its stages, one module each: :mod:`~te_ccl.compiler.options` (what to write),
:mod:`~te_ccl.compiler.strategy` (one strategy on checked input),
:mod:`~te_ccl.compiler.chunking` (the chunkings worth trying),
:mod:`~te_ccl.compiler.candidates` (every candidate behind one signature, in one registry),
:mod:`~te_ccl.compiler.portfolio` (what ``auto`` races, prunes and keeps),
:mod:`~te_ccl.compiler.solve` (the one place that picks the portfolio or a single backend),
:mod:`~te_ccl.compiler.judge` (the only module that knows how a candidate is timed),
:mod:`~te_ccl.compiler.incumbent` (the verified file held while the search goes on),
:mod:`~te_ccl.compiler.pipeline` (solve → check → lower → verify → write, per size
range too),
:mod:`~te_ccl.compiler.fits` (what the runtime can load, checked first),
:mod:`~te_ccl.compiler.best` (the schedule kept: solved, judged, checked),
:mod:`~te_ccl.compiler.render` (writing it, solved again where the runtime cannot hold it),
:mod:`~te_ccl.compiler.result` (what a compile returns and reports),
:mod:`~te_ccl.compiler.warm` (compiling again from a previous file when the network
changed; :mod:`~te_ccl.compiler.splice` moves only what crossed a lost link) and
:mod:`~te_ccl.compiler.sizes` (one algorithm per message-size range).
The API, the CLI, the sweep and the benchmarks use only what this module exports.
"""

from te_ccl.backends.base import SolveParams
from te_ccl.compiler.best import drives_in_switch, forward_only, solve_best
from te_ccl.compiler.chunking import BASE_CHUNKS, chunk_candidates
from te_ccl.compiler.incumbent import Kept
from te_ccl.compiler.judge import SIM_LIMIT, XML_REPLAY_LIMIT, Timer, Timing, lower_file, xml_replay
from te_ccl.compiler.options import FORMATS, CompileOptions, check_plan_kind, output_format
from te_ccl.compiler.pipeline import WRITE_RESERVE_S, compile_collective, compile_size_library
from te_ccl.compiler.render import render_fitting, verified_algo
from te_ccl.compiler.result import CompileResult, summary
from te_ccl.compiler.sizes import parse_size_range
from te_ccl.compiler.solve import solve
from te_ccl.compiler.strategy import check_input
from te_ccl.compiler.warm import Previous, read_previous

__all__ = ["BASE_CHUNKS", "FORMATS", "SIM_LIMIT", "XML_REPLAY_LIMIT", "CompileOptions",
           "CompileResult", "Kept", "Previous", "SolveParams", "Timer", "Timing",
           "check_input", "check_plan_kind", "chunk_candidates", "compile_collective", "compile_size_library", "output_format",
           "drives_in_switch", "forward_only", "lower_file", "parse_size_range", "read_previous",
           "render_fitting", "solve", "solve_best", "summary", "verified_algo", "xml_replay",
           "WRITE_RESERVE_S"]
