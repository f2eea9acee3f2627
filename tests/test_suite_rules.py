"""Rules the suite keeps so that it passes on a slow or busy machine as on a fast one, and
so that `make test` stays short: property tests have no per-example deadline, the tests
marked slow are left out by default."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parent
DEADLINE = re.compile(r"\bsettings\(.*\bdeadline=(?!None\b)")


def test_property_tests_have_no_deadline():
    assert settings.default.deadline is None
    timed = [f"{path.relative_to(TESTS)}:{number}"
             for path in sorted(TESTS.rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if DEADLINE.search(line)]
    assert not timed, timed


def test_slow_tests_are_left_out_by_default_and_registered():
    options = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]
    assert "-m 'not slow'" in options["addopts"]
    assert any(marker.startswith("slow:") for marker in options["markers"])
