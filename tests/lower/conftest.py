"""Lowering tests: ``pytest tests/lower --update-golden`` (or UPDATE_GOLDEN=1) rewrites golden files."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    try:
        parser.addoption("--update-golden", action="store_true", default=False,
                         help="rewrite tests/golden/ files from the current output")
    except ValueError:  # already registered by another conftest
        pass


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    try:
        flag = bool(request.config.getoption("--update-golden"))
    except ValueError:
        flag = False
    return flag or os.environ.get("UPDATE_GOLDEN") == "1"
