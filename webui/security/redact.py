"""Secrets in text shown to people: hub tokens typed into the UI live in this process's memory
only; ``remember_secret`` adds one to what ``redact`` hides in log text shown in the UI."""
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

