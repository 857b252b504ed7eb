"""Who may see which run: the process-wide sign-in policy, the signed-in user of a request,
run ownership.

- ``configure(auth_enabled, admins)`` (``launch.py``) sets the policy; ``user_of(request)``
  is the signed-in user, or None when sign-in is off (one local user, who sees every run).
  With sign-in on, a request without a user is refused.
- ``can_access(user, run)``: a user sees, stops and downloads only their own runs; admins
  (``launch.py --admin``) see all. A run without an owner (made before sign-in was turned
  on) is visible to admins only. ``get_run_checked`` answers unknown and foreign run ids
  with one refusal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from backend.core.messages import Msg

class AccessDenied(PermissionError):
    """A request for a run or a file this user may not have; the message is for people."""



# ------------------------------------------------------------------------------ policy
@dataclass(frozen=True)
class Policy:
    auth_enabled: bool = False
    admins: frozenset[str] = frozenset()


_policy = Policy()


def configure(auth_enabled: bool, admins: Iterable[str] = ()) -> Policy:
    """Set the process-wide policy (``launch.py`` calls this before building the UI)."""
    global _policy
    _policy = Policy(bool(auth_enabled), frozenset(a for a in admins if a))
    return _policy


def policy() -> Policy:
    return _policy


def admins() -> frozenset[str]:
    return _policy.admins


def is_admin(user: str | None) -> bool:
    """Whether ``user`` may do everything: an admin, or the one local user (sign-in off)."""
    return user is None and not _policy.auth_enabled or (user is not None
                                                         and user in _policy.admins)


def preset_owner(user: str | None) -> dict[str, Any]:
    """The keyword arguments of the preset functions (``backend.config.presets``) for
    ``user``: their own presets (None with sign-in off: the shared ones, as before) and
    whether admin-only fields are theirs to set."""
    return {"user": user, "admin": is_admin(user)}


def user_of(request: Any) -> str | None:
    """The signed-in user of a gradio request; None when sign-in is off.

    With sign-in on, a request that carries no user (it should never reach a handler) is
    refused rather than treated as the all-seeing local user.
    """
    name = getattr(request, "username", None) if request is not None else None
    if name:
        return str(name)
    if _policy.auth_enabled:
        raise AccessDenied(Msg("access.sign_in"))
    return None


def _owner(run: Any) -> str | None:
    if isinstance(run, dict):
        return run.get("owner")
    return getattr(run, "owner", None)


def can_access(user: str | None, run: Any, admins: Iterable[str] | None = None) -> bool:
    """Whether ``user`` may see, stop and download ``run`` (a runner record)."""
    if run is None:
        return False
    if user is None:
        # Sign-in off: one local user. With sign-in on user_of never returns None.
        return not _policy.auth_enabled
    admin_set = _policy.admins if admins is None else frozenset(admins)
    if user in admin_set:
        return True
    owner = _owner(run)
    return owner is not None and owner == user


def list_owner(user: str | None, admins: Iterable[str] | None = None) -> str | None:
    """What to pass to ``runner.list_runs(owner=...)``: None lists every run."""
    admin_set = _policy.admins if admins is None else frozenset(admins)
    if user is None or user in admin_set:
        return None
    return user


def get_run_checked(runner: Any, run_id: str, user: str | None,
                    admins: Iterable[str] | None = None) -> dict:
    """The run's record when ``user`` may have it; the same refusal whether it does not exist
    or belongs to someone else (no probing for other users' run ids)."""
    run_id = str(run_id or "").strip()
    refusal = AccessDenied(Msg("access.no_such_run", got=run_id))
    if not run_id:
        raise refusal
    try:
        run = runner.get_run(run_id)
    except Exception:  # noqa: BLE001 - RunnerError for unknown ids; never say more
        raise refusal from None
    if not can_access(user, run, admins):
        raise refusal
    return run

