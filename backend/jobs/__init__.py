"""Jobs: runs carried by detached supervisors, with a SQLite history.

- ``history``    the SQLite schema, connections, transactions, settings
- ``processes``  the only module that starts a process: supervisors, stages, ``nvidia-smi``;
                 process identity, process trees, the environment of children
- ``queue``      which queued runs may start (GPU sets, free disk) and starting them
- ``supervisor`` the detached per-run process (``python -m backend.jobs.supervisor``)
- ``runner``     ``Runner``: what the UI and the API call (submit, stop, resume, read)
- ``watch``      logs and progress events, read from the end or by byte offset
- ``diagnosis``  a failed stage in plain language

Nothing is imported here: a supervisor starts in a fraction of a second.
"""
