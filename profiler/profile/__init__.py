"""The profile data: the in-memory model, its columns, and how frames become a profile.

Live runs and saved files go through the same path: frames are decoded (codec) and replayed
(replay) into a Profile (model); storage reads and writes files, live follows a recording,
summary and series derive the numbers every view shows.
"""
