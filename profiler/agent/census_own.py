"""What is memsight's own in the profiled process, told apart from the script's: its files
(their frames are not roots), its package (its modules and objects are not the user's), and
the exceptions raised inside a census.

The census calls no code of the user's, so an exception raised in it is a failure of the
census (reported, and the script runs on), except one raised by a signal handler of the
script's (SIGALRM for a per-step timeout), which runs wherever the main thread is, in the
middle of a census too: that one is the script's, and every `except` of the census lets it
through (_reraise_foreign); census_schedule.py shows it from the handler on (scripts_part).
Stdlib only; runs on the target's interpreter (Python 3.9+).
"""

from __future__ import annotations

import os
import types
from typing import Optional

from ..codefiles import OWN_DIR

# Every file of memsight (agent, protocol, units): its frames and modules are not the user's.
_OWN_DIR = OWN_DIR + os.sep
_OWN_PACKAGE = __name__.split(".")[0]


def _own(module: Optional[str]) -> bool:
    return module is not None and (module == _OWN_PACKAGE or module.startswith(_OWN_PACKAGE + "."))


def raised_by_the_script(exc: BaseException) -> bool:
    """Whether exc was raised by code that is not memsight's. The census calls no code of the
    user's, so that is a signal handler of the script's (SIGALRM for a per-step timeout) that
    ran in the middle of the census: its exception is the script's, not a failure of ours."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return not tb.tb_frame.f_code.co_filename.startswith(_OWN_DIR)


def scripts_part(tb: Optional[types.TracebackType]) -> Optional[types.TracebackType]:
    """A traceback from its first frame that is not memsight's on (the script's handler)."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN_DIR):
        tb = tb.tb_next
    return tb


def _reraise_foreign(exc: BaseException) -> None:
    """Raise exc again when the script raised it (raised_by_the_script)."""
    if raised_by_the_script(exc):
        raise exc
