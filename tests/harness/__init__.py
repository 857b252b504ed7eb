"""The test harness: what more than one test module uses, in one place.

No test module imports another; each imports from here (and its fixtures come from
``tests/conftest.py``, which imports them from here too).

- ``stages``: the stage subprocesses (``accelerate launch``), their environment, accelerate
  and DeepSpeed files, the demo dataset, progress checks.
- ``seeds``: the reference trainer's files and commands, verbatim.
- ``app``: ``launch.py`` and ``python -m webui`` as servers on free ports.
- ``browser``: the system Chromium through playwright, and the page's own events over HTTP.
- ``runs``: the job runner's fake stages and waits.
- ``media``: datasets of clips and edit pairs, reference LoRA files.
- ``families``: per-family tiny models, caches and trained LoRAs, built once per session.
- ``hub_server``: a local stand-in for the Hugging Face Hub; ``published``: a finished run
  to publish.
"""
