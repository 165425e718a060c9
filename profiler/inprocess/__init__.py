"""memsight inside a program of the user's: `memsight.record` and the IPython magics."""
