"""Who may see what, one concept per module (standard library only at import time:
``launch.py`` imports this before gradio, to refuse an unsafe launch within a second).

- ``access``: the sign-in policy, the signed-in user of a request, run ownership
  (``user_of``, ``can_access``, ``get_run_checked``).
- ``registry``: the only way a run's file leaves the server or is read for a user
  (``registry_file``, ``list_files``, ``read_run_file``) and downloads handed out
  (``stage_download``: bound to the user, expiring on time).
- ``paths``: which server paths a non-admin's run may name (``check_run_paths``,
  ``check_dataset_paths``, ``check_resume_paths``) and the read policy the run carries to
  its stages (``with_file_policy``; enforced by ``backend.core.readgate``).
- ``archive``: zip uploads unpacked safely (``safe_extract_zip``).
- ``quota``: per-user limits on uploads, dataset folders and caches.
- ``redact``: tokens hidden in text shown to people; server paths hidden from non-admins
  (``hide_server_paths``).
- sign-in itself is ``webui.auth`` (passwords, limiter, login wall), re-exported here.

Everything is re-exported, so ``from webui import security; security.X`` keeps working.
"""
from webui.auth import *  # noqa: F401,F403
from webui.auth import __all__ as _auth_all
from webui.security.access import (AccessDenied, Policy, admins, can_access, configure,
                                   get_run_checked, is_admin, list_owner, policy,
                                   preset_owner, user_of)
from webui.security.archive import (IMAGE_EXTS, MAX_ZIP_BYTES, MAX_ZIP_FILES, UPLOAD_EXTS,
                                    ExtractedFiles, UnsafeArchiveError, safe_extract_zip)
from webui.security.paths import (DATASETS_DIR, MAX_DATASET_ENTRIES, MODELS_DIR_ENV,
                                  PATH_OPTIONS, PLAN_ONLY_DEFAULTS, PLAN_ONLY_FIELDS,
                                  REPO_ROOT, check_dataset_paths, check_resume_paths,
                                  check_run_paths, user_dataset_root,
                                  with_file_policy, write_gate)
from webui.security.quota import (Quotas, cache_problems, configure_quotas, dataset_problems,
                                  expire_uploads, folder_bytes, quotas, upload_limit)
from webui.security.redact import (REDACTED, SECRET_PATTERNS, forget_secret,
                                   hide_server_paths, redact, remember_secret)
from webui.security.registry import (DB_NAMES, DOWNLOADS_DIR, NOBODY, RUN_READS, SERVED_DIR,
                                     SERVED_TTL_S, check_run_reads, download_expired,
                                     expire_downloads, gradio_cache, list_files,
                                     read_run_text, registry_file, served_dir,
                                     stage_download)
