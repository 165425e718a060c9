"""The census' bounds, in one place: how deep the walk goes, how many objects and holders it
takes, how often it reads the clock, when a container is a collection (read in chunks, after
the walk), and how much memory the census' own tables may hold.

The census runs inside the user's process, in a pause of the user's loop: every part of its
walk (census_walk.py and the modules it builds on) keeps to these, and a census that reaches
one stops and says so (cost["stopped_by"]). Stdlib only; runs on the target's interpreter
(Python 3.9+).
"""

from __future__ import annotations

MAX_DEPTH = 12  # steps below a root (a model's whole tree of submodules is one step)
MAX_OBJECTS = 2_000_000
MAX_HOLDERS = 200  # in to_json(), largest first; the rest are summed in holders_left_out
MAX_SHAPES = 5
MAX_NAMED_STEPS = 6  # below this many named steps, the rest of a path folds into its holder
MAX_NAMED_KEYS = 64  # a dict with more entries is a collection: its keys make no holders
MAX_KEY_CHARS = 40
CHECK_EVERY = 256  # objects between two readings of the clock
# A container with more items than BIG is a collection: it is not expanded into the
# breadth-first walk's next layer (4 M items would cost 64 MB of list there alone) but read
# CHUNK items at a time, depth-first, after the walk: its items are anonymous positions, so
# the order changes no name, and the budget is checked between chunks.
BIG = 1024
SHALLOW_ITEMS = 16  # a sequence up to this long is looked into two levels before it is walked
CHUNK = 1024
# A layer of the breadth-first walk holds at most this many objects; the objects met beyond it
# are walked depth-first at once (bounded stack), so a heap of any shape costs bounded memory.
FRONTIER_MAX = 65_536
# The visited set keeps ids in a Python set (about 60 bytes each) up to this many, then in a
# bitmap of one bit per 16 bytes of address space (objects are 16-byte aligned): about 1/128
# of the heap it covers.
SET_MAX = 150_000
# The census' own memory, at most: MEMORY_FLOOR + MEMORY_SHARE of the process' RSS. Past it,
# it stops (stopped_by "memory").
MEMORY_FLOOR = 16 * 2**20
MEMORY_SHARE = 0.01
