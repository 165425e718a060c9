"""Data files shipped with memsight (icons, desktop entry, report template, fixes knowledge base).

Installed as the package ``memsight_resources``; read them with ``profiler.resources.path``.
"""
