"""A profile file's first 16 bytes: magic, format version, flags (docs/profile-format.md).

Its own module because both ends of a file need it and neither should import the other:
the writer (profile/writer.py) writes the header and raises its version as the run shows
what the file will hold; the loader (profile/storage.py) reads it.
"""

from __future__ import annotations

import struct

MAGIC = b"MEMSIGHT"
# Version 2 is version 1 plus ATTACHMENT frames; version 3 adds the processes of a job other
# than the target (profile/processes.py: procs_ tables, events with "proc"), which an older
# reader would take for the target's. A file is written as the lowest version that holds what
# it has, so that older memsight releases still open every file they can.
ATTACHMENTS_VERSION = 2
PROCESSES_VERSION = 3
FORMAT_VERSION = 3
BASE_VERSION = 1
FILE_HEADER = struct.Struct("<8sHHI")  # magic, format version, flags, reserved
# Header flags. WHOLE: the file was written in one go after its recording ended (compacted),
# so its end, the recording_end event, must be there: a file with the flag that lacks it lost
# its tail. Older readers ignore the flags.
FLAG_WHOLE = 1
SUFFIX = ".memsight"


def file_header(version: int = BASE_VERSION, flags: int = 0) -> bytes:
    return FILE_HEADER.pack(MAGIC, version, flags, 0)
