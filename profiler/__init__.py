"""memsight's Qt-free core: agent, protocol, launch, recorder, profile, diagnosis, report, CLI.

The layers and their rules: docs/architecture.md.
"""

__version__ = "0.1.0"
