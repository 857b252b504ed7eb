"""Start, resume and render: written once for the tabs and the API.

Each checks what the signed-in user may read (a caption job: also write) before anything is
queued, gives the run the file policy its stages enforce (``backend.core.readgate``,
``backend.core.writegate``), hands a typed hub token and typed tracker keys to the run's
stages only (never a file or the history), and refuses with ``Refused``: a headline and the
problems, one per field, for each surface to show its own way.

Tracker keys follow the rule of a typed hub token (``webui/publishing.py``): a W&B or
SwanLab run in online mode logs to the account of the key its stages see. A key typed for
the run (``tracker_keys``: ``{"wandb_key": ..., "swanlab_key": ...}``) lives in memory, reaches
that run's stages through their environment only and is hidden from log text shown; none
typed means the server's environment, for admins and the one local user; a signed-in user
who is not an admin is refused, the field named. A resumed run needs the key again (the
supervisor that held it has ended).

    run_id = start_run(ctx, cfg, user, name=..., hub_token=..., tracker_keys=...)
    run_id = resume_run(ctx, run, user, hub_token=..., tracker_keys=...)
    job_id = render(ctx, run, settings, checkpoint_names, user)
    run_id = caption(ctx, cfg, user, hub_token=...)

``ctx`` is anything with ``runner``, ``workspace`` and ``models_dir`` (the tabs' ``Ctx``, the
API's closure).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Protocol

import yaml

from backend.config.errors import ConfigError, field_problem
from backend.config.schema import RunConfig
from backend.core.messages import Msg, said
from backend.jobs.runner import RunnerError
from backend.training.tracking import online_trackers
from webui import security

# The environment variable each download source reads its token from.
TOKEN_ENV = {"huggingface": "HF_TOKEN", "modelscope": "MODELSCOPE_API_TOKEN"}


class Where(Protocol):
    runner: Any
    workspace: Any
    models_dir: Any


class Refused(Exception):
    """Nothing was queued: ``headline`` says why, ``problems`` name the fields (messages,
    each ``field: problem``; text from elsewhere stays as it is)."""

    def __init__(self, headline: str, problems: list[str] | None = None):
        self.headline, self.problems = headline, list(problems or [])
        super().__init__("\n".join([headline] + [f"  {p}" for p in self.problems]))


def shown_to_user(fn):
    """``fn``'s refusals as its ``user`` may see them, whatever produced their text: for a
    signed-in non-admin no server path outside their own folders
    (``security.hide_server_paths``: the checkout, the workspace, the models folder appear
    relative). The one guard between every message below and the API or the tabs."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def guarded(where, *args, **kwargs):
        try:
            return fn(where, *args, **kwargs)
        except Refused as e:
            arguments = signature.bind(where, *args, **kwargs).arguments
            user = arguments.get("user")
            typed = typed_paths(arguments.get("cfg"))

            def hide(text: str) -> str:
                return security.hide_server_paths(text, user, where.workspace,
                                                  models_dir=where.models_dir,
                                                  runner=where.runner, typed=typed)

            raise Refused(each_text(e.headline, hide),
                          [each_text(p, hide) for p in e.problems]) from None

    return guarded


def each_text(value: Any, change) -> Any:
    """``value`` with ``change`` (text -> text: hide paths, redact tokens) applied to its
    text: a message's parameters one by one (it stays a message, so the page still renders
    it in either language), a list's items, a plain string itself."""
    if isinstance(value, Msg):
        return type(value)(value.code, **{k: each_text(v, change)
                                          for k, v in value.params.items()})
    if isinstance(value, (list, tuple)):
        return type(value)(each_text(v, change) for v in value)
    if isinstance(value, str):
        return change(value)
    return value


def typed_paths(cfg: Any) -> list[str]:
    """The path values a user gave in ``cfg`` (a RunConfig or a mapping): echoed back as
    given in refusals (``security.hide_server_paths``)."""
    if cfg is None:
        return []
    get = cfg.get if isinstance(cfg, dict) else (lambda k: getattr(cfg, k, None))
    out = []
    for name in security.PATH_OPTIONS:
        value = get(name)
        if isinstance(value, str):
            out += [v.strip().rsplit(":", 1)[0] if name != "dataset_base_path" else v.strip()
                    for v in value.split(",")] + [value]
    return out


def secret_env(token: str | None, download_source: str | None) -> dict[str, str] | None:
    """The run's in-memory environment for a typed hub token (None without one); the
    token is hidden from any log text shown from now on."""
    token = (token or "").strip()
    if not token:
        return None
    security.remember_secret(token)
    return {TOKEN_ENV.get(download_source or "", "HF_TOKEN"): token}


def tracker_env(values: Any, user: str | None, keys: dict[str, str] | None,
                resume: bool = False) -> tuple[dict[str, str], list[Msg]]:
    """({key variable: key} for each online tracker of ``values`` (a RunConfig or its saved
    YAML) given a typed key, the problems of those without one for a ``user`` who may not
    use the server's key); typed keys are hidden from any log text shown from now on."""
    env, problems = {}, []
    for t in online_trackers(values):
        key = str((keys or {}).get(t.key_field) or "").strip()
        if key:
            security.remember_secret(key)
            env[t.key_env] = key
        elif not security.is_admin(user):
            why = Msg("tracking.key_again", tracker=t.title, mode_option=t.mode_option) \
                if resume else Msg("tracking.own_key", tracker=t.title,
                                   mode_option=t.mode_option)
            problems.append(field_problem(t.key_field, why))
    return env, problems


def _env_kwargs(env: dict[str, str] | None) -> dict[str, Any]:
    return {"secret_env": env} if env else {}


def run_name_problem(name: str | None, field: str = "name") -> Msg | None:
    """The schema's ``run_name`` limit applied to a run name given beside the config."""
    from backend.config.meta import field_meta

    limit = field_meta("run_name").get("max_length")
    text = (name or "").strip()
    if limit is not None and len(text) > limit:
        return field_problem(field, Msg("config.run_name_too_long", n=len(text), limit=limit))
    return None


# Where a run's files go: the run plan sets these for every run, so a value given with the
# run would be silently replaced; refused for everyone, admins included.
PLAN_FIELDS = ("output_path", "progress_file")


def plan_field_problems(cfg: RunConfig) -> list[Msg]:
    return [field_problem(k, Msg("config.set_by_plan", got=repr(getattr(cfg, k))))
            for k in PLAN_FIELDS
            if getattr(cfg, k) not in (security.PLAN_ONLY_DEFAULTS[k], None, "")]


def _checked(where: Where, cfg: RunConfig, user: str | None, hub_token: str | None,
             more_problems=None, tracker_keys: dict[str, str] | None = None,
             trains: bool = True) -> tuple[RunConfig, dict]:
    """``cfg`` checked for what ``user`` may point at (plus ``more_problems(cfg)`` for fields
    the paths check did not name) and carrying their read policy, with the secret
    environment of its download and (``trains``: a run that may track) its trackers;
    ``Refused`` naming every problem."""
    problems = security.check_run_paths(cfg, user, where.workspace,
                                        models_dir=where.models_dir, runner=where.runner)
    if more_problems is not None:
        named = {p.split(":", 1)[0] for p in problems}
        problems += [p for p in more_problems(cfg) if p.split(":", 1)[0] not in named]
    keys_env, key_problems = tracker_env(cfg, user, tracker_keys) if trains else ({}, [])
    if problems or key_problems:
        headline = Msg("config.refused.paths", n=len(problems)) if problems else \
            Msg("tracking.keys_refused", n=len(key_problems))
        raise Refused(headline, problems + key_problems)
    cfg = security.with_file_policy(cfg, user, where.workspace, models_dir=where.models_dir,
                                    runner=where.runner)
    return cfg, {**(secret_env(hub_token, cfg.download_source) or {}), **keys_env} or None


@shown_to_user
def start_run(where: Where, cfg: RunConfig, user: str | None, *, name: str | None = None,
              hub_token: str | None = None, tracker_keys: dict[str, str] | None = None
              ) -> str:
    """Queue ``cfg`` as ``user``'s run; returns its id. ``name`` (the history's name; the
    form passes ``run_name``) has the schema's ``run_name`` length limit."""
    name_problem = run_name_problem(name)
    if name_problem:
        raise Refused(Msg("config.refused.run_name"), [name_problem])
    cfg, env = _checked(where, cfg, user, hub_token, plan_field_problems, tracker_keys)
    try:
        return where.runner.submit(cfg, owner=user, name=(name or "").strip() or None,
                                   **_env_kwargs(env))
    except ConfigError as e:  # what the stages would refuse, checked before the queue
        raise Refused(Msg("config.refused.stages", n=len(e.problems)),
                      [each_text(p, security.redact) for p in e.problems]) from None
    except (RunnerError, ValueError, OSError) as e:
        raise Refused(each_text(said(e), security.redact)) from None


@shown_to_user
def resume_run(where: Where, run: dict, user: str | None, *,
               hub_token: str | None = None, tracker_keys: dict[str, str] | None = None
               ) -> str:
    """Re-queue a stopped or failed run from its saved state (its paths checked again:
    the files or the folders it reads may have changed since)."""
    problems = security.check_resume_paths(where.runner, run, user, where.workspace,
                                           models_dir=where.models_dir)
    if problems:
        raise Refused(Msg("config.refused.paths", n=len(problems)), problems)
    saved = yaml.safe_load(run.get("config_yaml") or "") or {}
    saved = saved if isinstance(saved, dict) else {}
    keys_env, key_problems = tracker_env(saved, user, tracker_keys, resume=True)
    if key_problems:
        raise Refused(Msg("tracking.keys_refused", n=len(key_problems)), key_problems)
    source = saved.get("download_source")
    env = {**(secret_env(hub_token, source if isinstance(source, str) else None) or {}),
           **keys_env} or None
    try:
        return where.runner.resume(run["id"], **_env_kwargs(env))
    except (RunnerError, ValueError, OSError) as e:
        raise Refused(each_text(said(e), security.redact)) from None


@shown_to_user
def render(where: Where, run: dict, settings: dict[str, Any], names: list[str],
           user: str | None) -> str:
    """Queue a render of ``run``'s checkpoints ``names`` with ``settings`` (sample_*
    fields); returns the job's id."""
    from webui import jobs

    try:
        return jobs.submit_render(where.runner, run, settings, list(names), user)
    except ConfigError as e:
        raise Refused(Msg("config.refused.sample_settings"), e.problems) from None
    except (RunnerError, ValueError, OSError) as e:
        raise Refused(each_text(said(e), security.redact)) from None


@shown_to_user
def caption(where: Where, cfg: RunConfig, user: str | None, *,
            hub_token: str | None = None) -> str:
    """Queue a caption job for ``cfg``'s dataset folder (``backend.planning.caption_job``); returns its
    id. The folder, its images and the captioning model are checked first."""
    from backend.data.captions import CaptionError
    from backend.planning.caption_job import submit_caption

    def write_problems(cfg: RunConfig) -> list[str]:
        # The job writes where caption_target says: that must be the user's own folder
        # (the write rule: bundled assets, models and other users' folders are read-only).
        metadata = cfg.dataset_metadata_path if cfg.caption_target == "metadata" else None
        return security.check_dataset_paths(cfg.dataset_base_path, metadata, user,
                                            where.workspace, write=True, runner=where.runner,
                                            models_dir=where.models_dir)

    cfg, env = _checked(where, cfg, user, hub_token, write_problems, trains=False)
    try:
        return submit_caption(where.runner, cfg, owner=user, secret_env=env)
    except CaptionError as e:
        raise Refused(Msg("config.refused.caption"), e.problems) from None
    except (RunnerError, ValueError, OSError) as e:
        raise Refused(each_text(said(e), security.redact)) from None
