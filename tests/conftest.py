from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

from tests.load import (
    ENV_VAR,
    MARK,
    OPTION,
    CpuHogs,
    cores,
    deadline,
    one_thread_per_program,
    parse_hogs,
    set_load,
    under_load,
)

# Qt must never look for a display: the suite runs headless, locally and in CI.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# The suite under load (tests/load.py): how many busy loops run beside the tests.
HOGS = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        metavar="N|auto",
        default=None,
        help=(
            "run the tests beside N busy-loop processes (auto: 2 per core; 0: none, the "
            f"default), to check that verdicts hold on a busy machine; also set by {ENV_VAR}"
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARK}: the tier CI runs again beside CPU hogs (tests/load.py, UNDER_LOAD)"
    )
    option = config.getoption(OPTION)
    value, source = (option, OPTION) if option is not None else (os.environ.get(ENV_VAR), ENV_VAR)
    try:
        config.stash[HOGS] = parse_hogs(value) if value else 0
    except ValueError as error:
        raise pytest.UsageError(f"{source}: {error}") from None
    if config.stash[HOGS] and getattr(config.option, "numprocesses", None):
        # Each xdist worker would start its own busy loops, and the load would not be the
        # one asked for: the suite under load runs in one session.
        raise pytest.UsageError(f"{source}: runs in one test session; leave out -n")
    if config.stash[HOGS]:
        one_thread_per_program(os.environ)
        set_load(config.stash[HOGS])


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    hogs = config.stash.get(HOGS, 0)
    quiet_limit = float(config.getini("timeout") or 0)
    for item in items:
        if under_load(item.nodeid):
            item.add_marker(MARK)
        if hogs:
            # pytest-timeout's limit (the ini's, or the test's own marker) is a hang guard
            # like the helpers' deadlines, and is stretched the same way under load.
            own = item.get_closest_marker("timeout")
            limit = float(own.args[0]) if own is not None and own.args else quiet_limit
            if limit > 0:
                item.add_marker(pytest.mark.timeout(deadline(limit)), append=False)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Everything imported so far (torch, Qt, numpy, every test module: some 300,000 objects)
    # lives to the end of the session. Frozen, it is left out of every garbage collection
    # after this one: the GUI tests' collection after each test (tests/gui/conftest.py) and
    # Python's own full collections cost ~0.2 s each over them, and no test's garbage is
    # among them.
    gc.collect()
    gc.freeze()


def _hogs_line(config: pytest.Config) -> str:
    count = config.stash.get(HOGS, 0)
    if not count:
        return f"cpu hogs: none ({OPTION}=N|auto or {ENV_VAR} runs the tests under load)"
    return f"cpu hogs: {count} busy loops beside the tests, on {cores()} cores"


def pytest_report_header(config: pytest.Config) -> str:
    return _hogs_line(config)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # The header is left out under -q; a run under load says so at its end all the same.
    if terminalreporter.config.stash.get(HOGS, 0):
        terminalreporter.write_line(_hogs_line(terminalreporter.config))


@pytest.fixture(scope="session", autouse=True)
def cpu_hogs(request: pytest.FixtureRequest) -> Iterator[CpuHogs]:
    """The busy loops of --cpu-hogs, running from the first test to the end of the session."""
    with CpuHogs(request.config.stash.get(HOGS, 0)) as hogs:
        yield hogs
