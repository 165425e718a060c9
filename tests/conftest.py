from __future__ import annotations

import os

# Qt must never look for a display: the suite runs headless, locally and in CI.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
