"""The importer never writes a topology its own loader rejects: every dump of the test data,
under every option set, either loads back from the YAML `topo import` writes, with the
nodes and links it reported, or the import exits 2 with one line about the dump or a flag
and writes nothing (`topo import` checks what it writes: a YAML its loader refused would
be an exit 2 naming the output)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from te_ccl.spec.topology import load_topology

DATA = Path(__file__).parent / "data"
DUMPS = sorted(p.name for p in DATA.iterdir() if p.suffix in (".xml", ".txt"))
OPTIONS = [(), ("--nodes", "2"), ("--arch", "90"), ("--arch", "gfx942"),
           ("--gpus", "8", "--arch", "86"),
           ("--gpus", "8", "--arch", "90", "--nvswitch-links", "18"),
           ("--nodes", "3", "--fabric", "fat-tree", "--nic-bw", "100Gbps"),
           ("--nodes", "2", "--fabric", "single-switch", "--arch", "80", "--nvswitch-links", "12")]
SUMMARY = re.compile(r"^\S+: (\d+) GPUs, (\d+) switches, (\d+) directed links$", re.MULTILINE)


def test_the_data_holds_every_kind_of_dump():
    assert len(DUMPS) >= 15 and {p.split("-")[0] for p in DUMPS} >= {"aws", "azure", "rccl"}


@pytest.mark.parametrize("options", OPTIONS, ids=" ".join)
@pytest.mark.parametrize("name", DUMPS)
def test_import_loads_back_or_exits_2_with_one_line(teccl, tmp_path, name, options):
    out = tmp_path / "imported.yaml"
    code, _, err = teccl("topo", "import", str(DATA / name), *options, "-o", str(out))
    if code == 0:
        gpus, switches, links = map(int, SUMMARY.search(err).groups())
        t = load_topology(str(out))
        assert (t.ngpus, len(t.switches), len(t.links)) == (gpus, switches, links)
    else:
        assert code == 2 and not out.exists(), err
        assert len(err.strip().splitlines()) == 1 and err.startswith("teccl: error: ")
        assert str(out) not in err, err  # the dump or a flag is at fault, never what we wrote


@pytest.mark.parametrize("name", DUMPS)
def test_plain_import_of_every_dump_but_the_gpuless_ones_succeeds(teccl, tmp_path, name):
    code, _, err = teccl("topo", "import", str(DATA / name), "-o", str(tmp_path / "t.yaml"))
    gpuless = name in ("aws-p5.48xl-static-topo.xml", "aws-g5.48xl-topo.xml")
    assert code == (2 if gpuless else 0), err
