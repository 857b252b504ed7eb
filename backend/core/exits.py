"""The exit codes of every stage (``backend/stages/*``), one table for all of them. The run
history records them; the failure diagnosis (``backend.jobs.diagnosis``) reads the log for
the plain-language reason.

| code | name      | meaning                                                                 |
|------|-----------|-------------------------------------------------------------------------|
| 0    | OK        | the stage did its work                                                  |
| 1    | CRASHED   | an unexpected error; the traceback is in the stage's log                |
| 2    | REFUSED   | the stage refused what it was given: an option, the command line, a     |
|      |           | dataset, captions, a cache, a model source, a checkpoint (the message   |
|      |           | names the field or file; no traceback)                                  |
| 3    | RESOURCES | the machine ran out: disk full, the file-size limit, GPU or CPU memory  |
| 143  | STOPPED   | stopped on request (SIGTERM, 128 + 15); training saved its state first  |
"""
from __future__ import annotations

import errno

OK = 0
CRASHED = 1
REFUSED = 2
RESOURCES = 3
STOPPED = 143

# errno values of a write the machine could not hold: disk full, quota, file-size limit.
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# Exception class names that mean the machine ran out of memory (torch's CUDA and MPS
# errors), matched by name so this module imports nothing.
OUT_OF_MEMORY = ("OutOfMemoryError",)


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` (or what it was raised from) is an out-of-memory error."""
    return any(type(x).__name__ in OUT_OF_MEMORY or isinstance(x, MemoryError)
               for x in _chain(e))


def _chain(e: BaseException | None):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def of_unexpected(e: BaseException) -> int:
    """The code of an error a stage did not expect: RESOURCES when the machine ran out
    (memory, disk, the file-size limit), else CRASHED."""
    if out_of_memory(e) or any(isinstance(x, OSError) and x.errno in NO_ROOM
                               for x in _chain(e)):
        return RESOURCES
    return CRASHED
