"""A training script whose first line opens a data file that was never downloaded.

The FileNotFoundError ends the run before torch is even imported. memsight finding:
run-failed (critical), with the error and fails_on_first_line.py's line, instead of
"no problems found".
"""
# memsight-expect: run-failed

with open("data/train.csv") as rows:  # there is no data/ folder here
    samples = [line.rstrip("\n").split(",") for line in rows]

# Never reached: the model and the training loop would follow.
