"""memsight's Qt-free core: agent, protocol, recorder, model, storage, diagnosis, report, CLI."""

__version__ = "0.1.0"
