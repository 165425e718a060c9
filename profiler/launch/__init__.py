"""Launching a run: what to run (spec), checking it (preflight), the child's command line
(command) and where memsight itself runs from (runtime)."""
