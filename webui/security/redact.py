"""Secrets in text shown to people: hub tokens typed into the UI live in this process's memory
only; ``remember_secret`` adds one to what ``redact`` hides in log text shown in the UI.
Server paths in text shown to a non-admin: ``hide_server_paths`` writes them relative."""
from __future__ import annotations

import re
import threading

# ------------------------------------------------------------------------------ secrets
_secrets: set[str] = set()
_secrets_lock = threading.Lock()
SECRET_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{16,}\b"),
    re.compile(r"(?i)(authorization\s*[:=]\s*(?:bearer|token)\s+)[^\s'\"]+"),
    # KEY=value / "key": "value" where a _-separated part of KEY names a secret
    # (HF_TOKEN, MODELSCOPE_API_TOKEN, hub_token; not TOKENIZERS_PARALLELISM).
    re.compile(r"(?i)\b((?:[A-Z0-9]+_)*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|"
               r"CREDENTIALS?)(?:_[A-Z0-9]+)*[\"']?\s*[=:]\s*[\"']?)(?!\*\*\*)[^\s'\",;&]+"),
    re.compile(r"(?i)([?&](?:token|access_token|api_key)=)[^&\s'\"]+"),
]
REDACTED = "***"


def remember_secret(value: str | None) -> None:
    """Add a secret (a token typed into the UI) to what ``redact`` hides; memory only."""
    if value and len(value) >= 6:
        with _secrets_lock:
            _secrets.add(value)


def forget_secret(value: str | None) -> None:
    with _secrets_lock:
        _secrets.discard(value or "")


def redact(text: str | None) -> str:
    """``text`` with tokens hidden: every secret remembered by this process, plus anything
    shaped like a hub token, an Authorization header or ``SOMETHING_TOKEN=value``."""
    if not text:
        return text or ""
    with _secrets_lock:
        known = sorted(_secrets, key=len, reverse=True)
    for s in known:
        text = text.replace(s, REDACTED)
    text = SECRET_PATTERNS[0].sub(REDACTED, text)
    for pat in SECRET_PATTERNS[1:]:
        text = pat.sub(lambda m: m.group(1) + REDACTED, text)
    return text



# ------------------------------------------------------------------------- server paths
# An absolute path in a message: from a "/" not inside a word or another path, up to a
# space, a quote, a bracket or punctuation that ends a clause.
_ABS_PATH = re.compile(r"(?<![\w.~/-])/[^\s'\"`,;:()\[\]{}<>|]*")


def hide_paths(text: str | None, keep: list, shown: list, typed=()) -> str:
    """``text`` with every absolute path under one of the ``shown`` ``(root, label)``
    folders written relative to it (``label/rest``; label "" for plain relative text),
    except paths under a ``keep`` folder, which stay as they are. Paths are compared as
    text (both given and link-resolved forms of each root; nothing on disk is looked at,
    so no answer depends on whether a path exists). Other absolute paths, and every path the
    user typed (``typed``: the values they gave, echoed back as given, so a rewritten echo
    never tells them which of their guesses is a server folder), stay as they are."""
    import os

    if not text:
        return text or ""

    def forms(root) -> list[str]:
        out = {os.path.normpath(os.fspath(root)), os.path.realpath(os.fspath(root))}
        return [f for f in out if f != "/"]

    keep_forms = [f for r in keep for f in forms(r)]
    typed_forms = {t for t in typed if isinstance(t, str) and t.startswith("/")} | \
        {os.path.normpath(t) for t in typed if isinstance(t, str) and t.startswith("/")}
    shown_forms = sorted(((f, label) for r, label in shown for f in forms(r)),
                         key=lambda x: -len(x[0]))

    def under(path: str, root: str) -> bool:
        return path == root or path.startswith(root + "/")

    def one(m: re.Match) -> str:
        token = m.group(0)
        tail = ""
        while token and token[-1] in ".!?":  # a sentence's end, not the path's
            token, tail = token[:-1], token[-1] + tail
        path = os.path.normpath(token) if token else token
        if not path or token in typed_forms or path in typed_forms or \
                any(under(path, k) for k in keep_forms):
            return m.group(0)
        for root, label in shown_forms:
            if under(path, root):
                rest = path[len(root):].lstrip("/")
                if not label:
                    return (rest or ".") + tail
                return (f"{label}/{rest}" if rest else label) + tail
        return m.group(0)

    return _ABS_PATH.sub(one, text)


def hide_server_paths(text: str | None, user: str | None, workspace, *,
                      models_dir=None, runner=None, admins=None, repo_root=None,
                      cwd=None, typed=()) -> str:
    """``text`` as ``user`` may see it: for a signed-in user who is not an admin, paths of
    the server -- the repository checkout, the workspace outside the user's own folders
    (their datasets folder, their runs), the models folder -- appear relative
    (``backend/assets/...``, ``<workspace>/...``, ``<models folder>/...``); paths under
    the user's own folders, values they typed (``typed``) and any other path stay. Sign-in off and
    admins: ``text`` unchanged. The guard every refusal passes on its way to a non-admin
    (``webui.services``, the API's config errors, the importer's notes)."""
    import os
    from pathlib import Path

    from webui.security import paths

    if not text or paths._unrestricted(user, admins) == []:
        return text or ""
    repo = Path(os.path.realpath(repo_root or paths.REPO_ROOT))
    ws = Path(os.path.realpath(Path(workspace).expanduser()))
    base = Path(cwd or os.getcwd()).resolve()
    keep: list = []
    models: list = []
    if user is not None:
        try:
            roots = paths._Roots(user, ws, models_dir, repo, runner, base)
        except Exception:  # noqa: BLE001 - no roots: nothing of the user's to keep
            roots = None
        if roots is not None:
            keep = [roots.user_datasets, *roots.datasets, *roots.runs]
            models = [m for m in roots.models if m and m != roots.assets]
    if not models:
        models = [p for p in (paths._real(models_dir, base) if models_dir else None,
                              paths._real(os.environ.get(paths.MODELS_DIR_ENV) or "./models",
                                          base)) if p]
    shown = [(m, "<models folder>") for m in models] + [(ws, "<workspace>"), (repo, "")]
    return hide_paths(text, keep, shown, typed)
