"""The gates a contributor runs are CI's: one ruff version for pre-commit and for .ci/run."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version

from tests.support import ROOT


def test_the_pre_commit_ruff_hook_is_the_ruff_the_dev_extra_pins():
    hooks = (ROOT / ".pre-commit-config.yaml").read_text()
    rev = re.search(r"astral-sh/ruff-pre-commit\n\s+rev: v(\S+)", hooks)
    pinned = re.search(r'"ruff==([^"]+)"', (ROOT / "pyproject.toml").read_text())
    assert rev and pinned, "the ruff hook or the dev extra's pin is gone"
    assert rev.group(1) == pinned.group(1)
    try:
        installed = version("ruff")
    except PackageNotFoundError:  # an environment without the lint extra (tox's Python 3.10)
        return
    assert installed == pinned.group(1)
