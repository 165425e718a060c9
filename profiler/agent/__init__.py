"""The agent runs inside the profiled process, on the user's interpreter (Python 3.9+).

Rules (docs/architecture.md rule 2): stdlib only; torch is reached through sys.modules once the script
imported it; CUDA is never initialised here; nothing the script can observe is changed; every
failure of the agent becomes an `agent_error` event and the script runs on.

The launcher runs the user's own ``python SCRIPT ARGS...`` with startup/ first on PYTHONPATH;
Python's site module imports startup/sitecustomize.py, which loads this package under a
private name (so a script's own ``profiler`` or ``app`` modules win) and calls entry.start().
"""
