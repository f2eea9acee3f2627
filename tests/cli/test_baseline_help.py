"""``teccl baseline --help`` names every template (its list is written out, so that
``--help`` loads no baseline)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from te_ccl.baselines import BASELINES
from te_ccl.cli.main import cli


def test_the_help_names_every_baseline():
    out = CliRunner().invoke(cli, ["baseline", "--help"]).output
    text = re.sub(r"(\w)- (\w)", r"\1-\2", " ".join(out.split()))  # rejoin names wrapped
    listed = re.search(r"KIND \(([^)]*)\)", text).group(1)
    assert listed.split(", ") == list(BASELINES)
