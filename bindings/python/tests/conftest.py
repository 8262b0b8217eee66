"""Says which wmreplay the tests import; with ``WMREPLAY_EXPECT_PREFIX`` set
(CI: the fresh virtualenv the wheel went into), refuses to run against any
other copy, such as the source tree."""

import os

import pytest

import wmreplay


def pytest_report_header(config):
    return f"wmreplay imported from {wmreplay.__file__}"


def pytest_configure(config):
    prefix = os.environ.get("WMREPLAY_EXPECT_PREFIX")
    if prefix:
        where = os.path.realpath(wmreplay.__file__)
        if not where.startswith(os.path.realpath(prefix) + os.sep):
            raise pytest.UsageError(f"wmreplay was imported from {where}, not from {prefix}")
