"""Data files shipped with memsight (icons, desktop entry, report template, fixes knowledge base).

Installed as the package ``memsight.resources``; read them with ``memsight.profiler.resources.path``.
"""
