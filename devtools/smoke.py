"""The install users get: a fresh venv, ``pip install .`` with no extras, every subcommand once.

Run from the repository root with any Python >= 3.11: ``python3 -m devtools.smoke``
(``make smoke``; CI runs it after the tests, which install every extra and so cannot
notice a missing dependency). It uses the standard library only. The package sources are
copied to a temporary directory and installed from there into a new venv, and every
command runs that venv's ``teccl`` in a scratch directory, so nothing is imported from
the source tree. Every module of the package is imported once (an undeclared dependency
fails there), then each subcommand runs on small inputs with its exit code and output
checked, and the optional extras are shown to be absent and asked for by name. Exit 0 if
every step passed, 1 if any failed (each failure is printed with the command's stderr).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "importers" / "data"
EXAMPLES = REPO / "examples"
PACKAGE = ("pyproject.toml", "README.md", "LICENSE", "te_ccl")
EXTRAS = ("matplotlib", "ray", "pytest", "hypothesis")
STEP_TIMEOUT_S = 300  # a hang guard only; every step takes seconds

# Every module imports without an extra, and the extras really are absent.
IMPORT_ALL = f"""
import importlib, importlib.util, pkgutil, te_ccl
names = [m.name for m in pkgutil.walk_packages(te_ccl.__path__, "te_ccl.")
         if m.name != "te_ccl.__main__"]
for name in names:
    importlib.import_module(name)
present = [x for x in {EXTRAS!r} if importlib.util.find_spec(x) is not None]
assert not present, f"extras installed in a no-extras venv: {{present}}"
print(len(names))
"""

JOBS = """jobs:
  - {name: a, ranks: [g0, g1, g2, g3], collective: allgather, size: 1MB}
  - {name: b, ranks: [g0, g1, g4, g5], collective: allreduce, size: 1MB, weight: 2}
"""

GRID = """name: smoke
topologies: [dgx1]
collectives: [allgather]
sizes: [{at: 1MB}]
chunks: [1]
time_limit: 10s
"""


@dataclass
class Step:
    """One command: its exit code must be ``code`` and ``check(stdout, stderr)`` must hold."""

    name: str
    argv: list[str]
    code: int = 0
    check: Callable[[str, str], bool] = field(default=lambda out, err: True)


def json_has(*keys: str) -> Callable[[str, str], bool]:
    def check(out: str, err: str) -> bool:
        data = json.loads(out)
        return all(k in data for k in keys)
    return check


def one_line_naming(*words: str) -> Callable[[str, str], bool]:
    def check(out: str, err: str) -> bool:
        lines = err.strip().splitlines()
        return len(lines) == 1 and all(w in lines[0] for w in words) and "Traceback" not in err
    return check


def steps(python: str, teccl: str, work: Path) -> list[Step]:
    (work / "grid.yaml").write_text(GRID)
    (work / "jobs.yaml").write_text(JOBS)
    (work / "garbage.txt").write_text("GPU0 GPU1\nGPU0 X\n")
    return [
        Step("every module imports without extras", [python, "-c", IMPORT_ALL],
             check=lambda out, err: int(out) > 50),
        Step("teccl --version", [teccl, "--version"], check=lambda out, err: "teccl" in out),
        Step("topo list", [teccl, "topo", "list", "--json"], check=json_has("topologies")),
        Step("topo import NCCL XML", [teccl, "topo", "import", str(DATA / "rccl-topo_8p_940.xml"),
                                      "-o", "mi300x.yaml"],
             check=lambda out, err: "8 GPUs" in err and (work / "mi300x.yaml").is_file()),
        Step("topo import nvidia-smi", [teccl, "topo", "import",
                                        str(DATA / "dgx1-v100-nvidia-smi-topo.txt"),
                                        "-o", "dgx1.yaml"],
             check=lambda out, err: "8 GPUs" in err and (work / "dgx1.yaml").is_file()),
        Step("topo show", [teccl, "topo", "show", "dgx1.yaml", "--json"],
             check=lambda out, err: json.loads(out)["ngpus"] == 8),
        Step("topo calibrate", [teccl, "topo", "calibrate", "dgx-h100",
                                str(EXAMPLES / "nccl-tests" / "all_reduce_perf.txt"),
                                "-o", "calibrated.yaml"],
             check=lambda out, err: (work / "calibrated.yaml").is_file()),
        Step("compile", [teccl, "compile", "dgx1.yaml", "-c", "allgather", "-s", "1MB",
                         "--time-limit", "10", "-o", "ag.xml", "--json"],
             check=lambda out, err: (work / "ag.xml").is_file()),
        Step("compile a dump directly", [teccl, "compile", str(DATA / "rccl-topo_8p_940.xml"),
                                         "-c", "allreduce", "-s", "1MB", "--time-limit", "10",
                                         "-o", "ar.xml"],
             check=lambda out, err: (work / "ar.xml").is_file()),
        Step("verify", [teccl, "verify", "ag.xml", "--json"], check=json_has("valid")),
        Step("simulate", [teccl, "simulate", "dgx1.yaml", "ag.xml", "--json"]),
        Step("baseline", [teccl, "baseline", "ring", "dgx1.yaml", "-c", "allreduce", "-s", "1MB",
                          "-o", "ring.xml"],
             check=lambda out, err: (work / "ring.xml").is_file()),
        Step("verify the baseline", [teccl, "verify", "ring.xml"]),
        Step("fred evaluate", [teccl, "fred", "evaluate", "-w", "resnet152", "--json"]),
        Step("topo gen", [teccl, "topo", "gen", "fred-b", "--npus", "8", "-o", "fred8.yaml"],
             check=lambda out, err: (work / "fred8.yaml").is_file()),
        Step("fred versus", [teccl, "fred", "versus", "-c", "allreduce", "-s", "1MB",
                             "--npus", "8", "--time-limit", "5", "--json"]),
        Step("topo edit", [teccl, "topo", "edit", "dgx1.yaml", "--without-link", "g0:g1",
                           "-o", "cut.yaml"],
             check=lambda out, err: (work / "cut.yaml").is_file()),
        Step("compile --from", [teccl, "compile", "cut.yaml", "-c", "allgather", "-s", "1MB",
                                "--time-limit", "10", "--from", "ag.xml", "-o", "again.xml"],
             check=lambda out, err: (work / "again.xml").is_file()),
        Step("compile --format mscclpp", [teccl, "compile", "dgx1.yaml", "-c", "allgather",
                                          "-s", "1MB", "--time-limit", "10", "--format",
                                          "mscclpp", "-o", "ag.mscclpp.json"],
             check=lambda out, err: (work / "ag.mscclpp.json").is_file()),
        Step("verify a plan", [teccl, "verify", "ag.mscclpp.json", "--json"],
             check=json_has("valid")),
        Step("simulate a plan", [teccl, "simulate", "dgx1.yaml", "ag.mscclpp.json",
                                 "--size", "1MB", "--json"]),
        Step("compile --runtime rccl", [teccl, "compile", "mi300x", "-c", "allreduce", "-s",
                                        "1MB", "--time-limit", "10", "--runtime", "rccl",
                                        "-o", "rccl.xml"],
             check=lambda out, err: (work / "rccl.xml").is_file()),
        Step("verify --runtime rccl", [teccl, "verify", "rccl.xml", "--runtime", "rccl"]),
        Step("compile --jobs", [teccl, "compile", "dgx1.yaml", "--jobs", "jobs.yaml",
                                "--time-limit", "10", "-o", "jobs"],
             check=lambda out, err: (work / "jobs" / "a.xml").is_file()),
        Step("simulate --jobs", [teccl, "simulate", "dgx1.yaml", "--jobs", "jobs.yaml",
                                 "jobs", "--json"]),
        Step("sweep", [teccl, "sweep", "grid.yaml", "-o", "lib", "--workers", "1"],
             check=lambda out, err: (work / "lib" / "index.csv").is_file()),
        Step("sweep --format mscclpp", [teccl, "sweep", "grid.yaml", "-o", "plans",
                                        "--workers", "1", "--format", "mscclpp"],
             check=lambda out, err: (work / "plans" / "index.csv").is_file()),
        Step("compile --sizes", [teccl, "compile", "dgx1.yaml", "-c", "allgather", "--sizes",
                                 "1KB..64KB", "--time-limit", "10", "-o", "sizes"],
             check=lambda out, err: any((work / "sizes").glob("*.xml"))),
        Step("bad dump: exit 2, one line", [teccl, "topo", "import", "garbage.txt"], code=2,
             check=one_line_naming("garbage.txt")),
        Step("plot extra missing: exit 2 naming it",
             [teccl, "simulate", "dgx1.yaml", "ag.xml", "--timeline", "t.png"], code=2,
             check=one_line_naming("teccl[plot]")),
        Step("ray extra missing: exit 2 naming it",
             [teccl, "sweep", "grid.yaml", "-o", "lib2", "--ray-address", "auto"], code=2,
             check=one_line_naming("teccl[ray]")),
    ]


def install(root: Path) -> tuple[str, str]:
    """A new venv under ``root`` with the package installed from a copy of its sources."""
    src = root / "src"
    for name in PACKAGE:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    bin_dir = root / "venv" / "bin"
    subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-qq", str(src)],
                   check=True, timeout=STEP_TIMEOUT_S)  # -qq: errors only
    return str(bin_dir / "python"), str(bin_dir / "teccl")


def run(step: Step, work: Path) -> str | None:
    """None if ``step`` passed, else why not."""
    try:
        r = subprocess.run(step.argv, cwd=work, capture_output=True, text=True,
                           timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"no answer in {STEP_TIMEOUT_S} s"
    if r.returncode != step.code:
        return f"exit {r.returncode}, expected {step.code}\n{r.stderr.strip()}"
    try:
        if not step.check(r.stdout, r.stderr):
            return f"unexpected output\nstdout: {r.stdout.strip()[:2000]}\nstderr: {r.stderr.strip()}"
    except (ValueError, KeyError) as e:
        return f"unreadable output ({type(e).__name__}: {e})\n{r.stdout.strip()[:2000]}"
    return None


def main() -> int:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="teccl-smoke-") as tmp:
        root = Path(tmp)
        try:
            python, teccl = install(root)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            print(f"FAIL pip install . into a fresh venv: {e}")
            return 1
        print(f"ok   pip install . into a fresh venv ({time.monotonic() - start:.0f} s)")
        work = root / "work"
        work.mkdir()
        failed = 0
        for step in steps(python, teccl, work):
            t0 = time.monotonic()
            why = run(step, work)
            if why is None:
                print(f"ok   {step.name} ({time.monotonic() - t0:.1f} s)")
            else:
                failed += 1
                shown = " ".join("'<script>'" if "\n" in a else a for a in step.argv)
                print(f"FAIL {step.name}: {shown}\n     {why}")
    total = time.monotonic() - start
    print(f"smoke: {'all steps passed' if not failed else f'{failed} steps failed'} "
          f"in {total:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
