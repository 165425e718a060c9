"""The clock every row and event of the instrumentation is stamped with.

Called several times per step, so each module binds it once at import (`from .clock import
now as _now`): a module global, not an attribute lookup, on the hook paths. A test that needs
a clock of its own replaces `_now` in each module that bound it.
"""

import time

now = time.monotonic_ns
