"""`python -m devtools.small_alltoall`: the 8-32-GPU topologies and one row of its table."""

from click.testing import CliRunner

from devtools.small_alltoall import main, topologies


def test_rows_are_the_8_to_32_gpu_machines() -> None:
    names = topologies()
    assert {"dgx1", "ring8", "mesh4x4", "hgx-h100x4", "ndv2x4"} <= set(names)
    assert not {"mesh8x8", "rail8x8", "gb200-nvl72"} & set(names)


def test_a_row_gives_the_ratio_and_what_sets_the_bound() -> None:
    result = CliRunner().invoke(main, ["--topology", "dgx1", "--size", "1KB",
                                       "--time-limit", "10"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("| dgx1")]
    assert len(rows) == 2  # the default chunking and --chunks auto
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert float(cells[3]) >= 1.0 and cells[6].endswith("_s")


def test_a_compile_that_fails_keeps_the_table_s_columns() -> None:
    result = CliRunner().invoke(main, ["--topology", "dgx1", "--size", "1KB",
                                       "--time-limit", "0.001"])
    assert result.exit_code == 0, result.output
    header, *rows = [line for line in result.output.splitlines() if line.startswith("| ")]
    assert rows and all("exit 3" in row for row in rows)
    assert {row.count("|") for row in rows} == {header.count("|")}
