"""The scripting API: named gradio endpoints that return plain values (dicts, lists, text).

Built inside the UI's Blocks by ``webui.app`` (``add_api_endpoints(runner, workspace,
user_getter=..., models_dir=...)``), so it is served by the same server, behind the same
sign-in, with the same ownership rules as the pages (``webui.security``). Call it with
``gradio_client``::

    from gradio_client import Client
    c = Client("http://127.0.0.1:7860", auth=("alice", "pw"), analytics_enabled=False)
    run = c.predict(preset="cpu_demo", config="num_epochs: 1", name="", hub_token="",
                    api_name="/start_run")
    c.predict(run_id=run["run_id"], api_name="/run_status")

Endpoints (all take ``run_id`` as text where they concern one run):

- ``/start_run(config, preset, name, hub_token, wandb_key, swanlab_key) -> {run_id, status,
  name, owner}``: ``config`` is YAML text (JSON is YAML) or a mapping of run options, put on
  top of ``preset`` (a preset name; empty: schema defaults). ``hub_token`` (optional) reaches
  the run's stages through their environment only, and so do ``wandb_key`` /
  ``swanlab_key``: the online trackers' keys of this run (a signed-in user who is not an
  admin gives their own when the tracker logs online; the refusal names the field). ``output_path`` and ``progress_file`` are
  refused: the run plan puts every file of a run in its own folder. ``name`` has
  ``run_name``'s length limit.
- ``/start_caption(config, preset, hub_token) -> {run_id, status, name, owner}``: a
  caption job for the config's ``dataset_base_path`` (the ``caption_*`` options,
  ``captioner_path``, ``trigger_word``); follow it with ``/run_progress`` and
  ``/run_log(run_id, "caption")``, stop it with ``/stop_run``. A folder without images, an
  unknown ``caption_target`` or an unreadable folder is refused naming the field.
- ``/run_status(run_id) -> dict``; ``/run_progress(run_id) -> dict``;
  ``/stop_run(run_id) -> dict``; ``/resume_run(run_id, hub_token, wandb_key, swanlab_key)
  -> dict`` (a stopped or failed run continues from its saved state, its tracker keys given
  again, after its paths pass the start checks again:
  ``security.check_resume_paths``); ``/list_runs() -> list``;
  ``/list_outputs(run_id) -> list[{file, bytes}]``;
  ``/fetch_output(run_id, path) -> file`` (``path``: a listed ``file``; the client downloads
  it and returns its local path);
  ``/run_log(run_id, stage, offset) -> {text, offset}`` (tokens redacted; read through the
  run registry like downloads);
  ``/list_presets() -> list`` (bundled, shared and the caller's own presets).
- ``/publish_run(run_id, repo_id, private, formats, checkpoint, token, dry_run, existing,
  destination) -> {sent, repo_id, url, files, card | commit_url}``: the run's LoRA, or a
  full fine-tune's checkpoint (``formats`` of ``checkpoint``; default all formats of the
  latest) with a model card to ``destination`` (``huggingface``, the default, or
  ``modelscope``) at the address the server points at (its ``HF_ENDPOINT`` /
  ``MODELSCOPE_ENDPOINT``; never the caller's choice). ``token`` is kept in memory for the
  call; empty: the server's own, for admins only. ``dry_run``: the card and the file list,
  nothing sent. ``existing``: add a commit to your repository.
- ``/list_models() -> list[{model_id, source, bytes, files, status, missing, ...}]``: the
  server's models folder; ``/download_models(target, source) -> record`` fetches what a
  family (``family:<name>[:<variant>]``) or preset (``preset:<name>``) lacks, from
  ``source`` (modelscope | huggingface; empty: its own; a mirror is for admins);
  ``/download_progress(download_id) -> record`` (empty id: the latest; ``status``,
  ``bytes_done``, ``bytes_total``, ``speed``); ``/stop_download(download_id) -> record``
  stops it at its next chunk, keeping what it fetched (its starter or an admin);
  ``/verify_model(model_id) -> {ok, problems}``;
  ``/delete_model(model_id) -> {deleted, bytes}`` (admins only when sign-in is on)
  (``webui/tabs/models.py``).

Refusals (unknown or someone else's run, paths outside the run, bad configs, and -- with
sign-in on, for non-admins -- server paths outside the user's datasets, the models folder
and their own runs: ``security.check_run_paths``) raise an error whose message says what
was wrong, one ``field: problem`` per line; the client raises it as ``AppError``. A
non-admin's run is started with its read policy (``security.with_file_policy``): its stages
open files only inside that user's folders (``backend.core.readgate``).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import gradio as gr

from backend.core import bounded
from backend.config.errors import ConfigError
from backend.config.presets import list_presets, read_preset
from backend.config.validation import validate_layers
from backend.core.rundir import RunDir
from webui import publishing, security, services
from webui.tabs import models as models_tab

__all__ = ["add_api_endpoints", "ENDPOINTS"]

ENDPOINTS = ("start_run", "start_caption", "run_status", "run_progress", "stop_run", "resume_run", "list_runs",
             "list_outputs", "fetch_output", "run_log", "list_presets", "publish_run",
             "list_models", "download_models", "download_progress", "stop_download",
             "delete_model", "verify_model")
# Which environment variable carries a token for each download source.
RUN_FIELDS = ("id", "name", "owner", "status", "created_at", "started_at", "ended_at",
              "failure_reason", "stop_reason", "note", "attempt", "current_stage", "gpu_ids")


class _Fail(gr.Error):
    def __init__(self, message: str):
        super().__init__(message, print_exception=False)


def _english(value: Any) -> Any:
    """The API's JSON keeps English: a message (a ``str`` carrying its code) as plain text,
    in dicts and lists too."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {k: _english(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_english(v) for v in value]
    return value


def _summary(run: dict) -> dict:
    out = {k: _english(run.get(k)) for k in RUN_FIELDS}
    out["run_id"] = out.pop("id")
    out["stages"] = [{"name": s["name"], "status": s["status"], "exit_code": s["exit_code"]}
                     for s in run.get("stages", [])]
    if "resumable" in run:
        out["resumable"] = run["resumable"]
    return out


def _plain(value: Any, run_dir: Path) -> Any:
    """JSON-safe copy where every ``path`` becomes ``file``, run-relative (what fetch_output
    takes; None outside the run). gradio_client would try to download any dict with a
    string ``path``, and absolute server paths are not the client's business."""
    if isinstance(value, dict):
        return {("file" if k == "path" else str(k)): (_relative(v, run_dir) if k == "path"
                                                      else _plain(v, run_dir))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, run_dir) for v in value]
    if isinstance(value, str):  # a message too: its English
        return str(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


def _relative(path: Any, run_dir: Path) -> Any:
    """A path inside the run as run-relative text (what fetch_output takes); else None."""
    if not isinstance(path, str) or not path:
        return path
    try:
        return Path(path).resolve().relative_to(run_dir).as_posix()
    except (ValueError, OSError):
        return None


def parse_config(config: Any) -> dict:
    """``config`` as a mapping: a dict, or YAML/JSON text (empty: no changes)."""
    if config is None or config == "":
        return {}
    # Sizes, nesting and what YAML aliases expand to are bounded (backend/core/bounded.py).
    if isinstance(config, dict):
        try:
            bounded.check_value(config, "config")
        except bounded.ParseError as e:
            raise _Fail(str(e)) from None
        return dict(config)
    if not isinstance(config, str):
        raise _Fail(f"config: YAML text or a mapping of run options (got "
                    f"{type(config).__name__})")
    try:
        data = bounded.load_yaml(config, "config")
    except bounded.ParseError as e:
        raise _Fail(str(e)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise _Fail(f"config: top level must be a mapping of run options (got "
                    f"{type(data).__name__})")
    return data


def build_config(config: Any, preset: str, workspace: Path, user: str | None = None):
    """Validate ``preset`` (a name among ``user``'s presets) + ``config`` into a RunConfig
    (every problem reported at once)."""
    data: dict[str, Any] = {}
    preset = (preset or "").strip()
    if preset:
        # Names only: a path here would read any YAML file on the server.
        owner = security.preset_owner(user)
        known = dict(list_presets(workspace, owner["user"]))
        if preset not in known:
            raise _Fail(f"preset: no preset with this name (got {preset!r}; allowed "
                        f"{' | '.join(sorted(known)) or 'none'})")
        try:
            data, path = read_preset(preset, workspace, **owner)
        except ConfigError as e:
            raise _Fail(security.hide_server_paths(str(e), user, workspace)) from None
    overrides = parse_config(config)
    overrides.pop("schema_version", None)
    # Each problem names where its value came from: the preset, or this call's config.
    layers = ([(f"preset {preset!r}", data)] if preset else []) + [("start_run", overrides)]
    try:
        return validate_layers(layers)
    except ConfigError as e:
        raise _Fail(security.hide_server_paths(
            str(e), user, workspace, typed=services.typed_paths(overrides))) from None


def add_api_endpoints(runner, workspace: str | os.PathLike,
                      user_getter: Callable[[Any], str | None] | None = None,
                      models_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Define the named API endpoints inside the current ``gr.Blocks``; returns them by name.

    ``user_getter(request)`` names the signed-in user (default ``security.user_of``: None
    when sign-in is off). Admins come from ``security.admins()`` (``launch.py --admin``).
    """
    workspace = Path(workspace).expanduser().resolve()
    where = SimpleNamespace(runner=runner, workspace=workspace, models_dir=models_dir)
    who, checked_run = _access(runner, user_getter or security.user_of)
    fns = {}
    for fn in (*_start_endpoints(where, who), *_run_endpoints(where, who, checked_run),
               *_read_endpoints(where, who, checked_run),
               *_publish_endpoints(who, checked_run),
               *models_tab.api_endpoints(where, who, _Fail)):
        fns[fn.__name__] = gr.api(fn, api_name=fn.__name__)
    fns["fetch_output"] = _add_fetch_output(where, who)
    return fns


def _access(runner, get_user: Callable[[Any], str | None]):
    """``who(request)``: the caller; ``checked_run(run_id, request)``: a run the caller may
    read, whose files all stay inside it. Both raise a refusal as the endpoint's error."""

    def who(request: gr.Request) -> str | None:
        try:
            return get_user(request)
        except security.AccessDenied as e:
            raise _Fail(str(e)) from None

    def checked_run(run_id: str, request: gr.Request) -> dict:
        try:
            run = security.get_run_checked(runner, run_id, who(request))
            # Progress, config and logs are read by path: none may lead out of the run.
            security.check_run_reads(runner, run)
            return run
        except security.AccessDenied as e:
            raise _Fail(str(e)) from None

    return who, checked_run


def _refused(e: services.Refused) -> _Fail:
    return _Fail(str(ConfigError(e.problems)) if e.problems else e.headline)


def _started(runner, run_id: str) -> dict:
    run = runner.get_run(run_id)
    return {"run_id": run_id, "status": run["status"], "name": run.get("name"),
            "owner": run.get("owner")}


def _keys(wandb_key: str, swanlab_key: str) -> dict[str, str]:
    """The online trackers' keys a call gives for its run (``services.tracker_env``): kept in
    memory for the run's stages, never written."""
    return {"wandb_key": wandb_key or "", "swanlab_key": swanlab_key or ""}


def _start_endpoints(where: SimpleNamespace, who: Callable) -> tuple[Callable, ...]:
    """``/start_run`` and ``/start_caption``."""
    runner, workspace = where.runner, where.workspace

    def start_run(config: str | dict | None = None, preset: str = "", name: str = "",
                  hub_token: str = "", wandb_key: str = "", swanlab_key: str = "",
                  request: gr.Request = None) -> dict:
        """Start a run from run options (YAML text or a mapping) on top of a preset."""
        user = who(request)
        cfg = build_config(config, preset, workspace, user)
        try:
            run_id = services.start_run(where, cfg, user, name=name, hub_token=hub_token,
                                        tracker_keys=_keys(wandb_key, swanlab_key))
        except services.Refused as e:
            raise _refused(e) from None
        return _started(runner, run_id)

    def start_caption(config: str | dict | None = None, preset: str = "",
                      hub_token: str = "", request: gr.Request = None) -> dict:
        """Caption a dataset folder: run options (YAML text or a mapping) on a preset."""
        user = who(request)
        cfg = build_config(config, preset, workspace, user)
        try:
            run_id = services.caption(where, cfg, user, hub_token=hub_token)
        except services.Refused as e:
            raise _refused(e) from None
        return _started(runner, run_id)

    return start_run, start_caption


def _run_endpoints(where: SimpleNamespace, who: Callable,
                   checked_run: Callable) -> tuple[Callable, ...]:
    """``/run_status``, ``/run_progress``, ``/stop_run``, ``/resume_run``, ``/list_runs``."""
    runner = where.runner

    def run_status(run_id: str, request: gr.Request = None) -> dict:
        """The run's status, stages and failure reason (with a diagnosis when it failed)."""
        run = checked_run(run_id, request)
        out = _summary(run)
        if run["status"] == "failed":
            summary = runner.failure_summary(run["id"]) or {}
            out["failure"] = {k: (security.redact(v) if isinstance(v, str) else _english(v))
                              for k, v in summary.items()
                              if k in ("stage", "exit_code", "exit_text", "headline",
                                       "end_reason", "error_line", "diagnoses")}
        return out

    def run_progress(run_id: str, request: gr.Request = None) -> dict:
        """Step, total, loss, ETA, the loss curve and checkpoints/samples (run-relative)."""
        run = checked_run(run_id, request)
        return _plain(runner.progress(run["id"]), Path(run["run_dir"]).resolve())

    def stop_run(run_id: str, request: gr.Request = None) -> dict:
        """Stop a run (the stage saves its state first); returns its status."""
        run = checked_run(run_id, request)
        try:
            runner.stop(run["id"])
        except Exception as e:  # noqa: BLE001
            raise _Fail(str(e)) from None
        return _summary(runner.get_run(run["id"]))

    def resume_run(run_id: str, hub_token: str = "", wandb_key: str = "", swanlab_key: str = "",
                   request: gr.Request = None) -> dict:
        """Continue a stopped or failed run (training from its saved state)."""
        run = checked_run(run_id, request)
        try:
            services.resume_run(where, run, who(request), hub_token=hub_token,
                                tracker_keys=_keys(wandb_key, swanlab_key))
        except services.Refused as e:
            raise _refused(e) from None
        return _summary(runner.get_run(run["id"]))

    def list_runs(request: gr.Request = None) -> list:
        """Your runs (admins: everyone's), newest first."""
        user = who(request)
        owner = security.list_owner(user)
        return [_summary(r) for r in runner.list_runs(owner=owner)
                if security.can_access(user, r)]

    return run_status, run_progress, stop_run, resume_run, list_runs


def _read_endpoints(where: SimpleNamespace, who: Callable,
                    checked_run: Callable) -> tuple[Callable, ...]:
    """``/list_outputs``, ``/run_log``, ``/list_presets``."""
    runner, workspace = where.runner, where.workspace

    def list_outputs(run_id: str, request: gr.Request = None) -> list:
        """The run's files as run-relative paths with sizes (for fetch_output)."""
        try:
            return security.list_files(runner, run_id, who(request))
        except security.AccessDenied as e:
            raise _Fail(str(e)) from None

    def run_log(run_id: str, stage: str = "train", offset: int = 0,
                request: gr.Request = None) -> dict:
        """New log text of a stage from byte ``offset`` (tokens redacted)."""
        run = checked_run(run_id, request)
        stage = str(stage or "")
        if not re.match(r"^[A-Za-z0-9_.-]{1,64}$", stage) or stage.startswith("."):
            raise _Fail(f"stage: not a stage name (got {stage!r}; allowed "
                        f"{', '.join(s['name'] for s in run.get('stages', [])) or 'none'})")
        try:
            text, new_offset = security.read_run_text(runner, run["id"], RunDir.log_relpath(stage),
                                                      who(request), int(offset or 0))
        except (security.AccessDenied, ValueError, OSError) as e:
            raise _Fail(str(e)) from None
        return {"text": security.redact(text), "offset": new_offset}

    def list_presets(request: gr.Request = None) -> list:
        """Preset names usable as start_run's ``preset`` (bundled, shared, your own)."""
        from backend.config.presets import list_presets as presets

        return [name for name, _ in presets(workspace, security.preset_owner(who(request))
                                            ["user"])]

    return list_outputs, run_log, list_presets


def _publish_endpoints(who: Callable, checked_run: Callable) -> tuple[Callable, ...]:
    """``/publish_run``: the run's LoRA or full checkpoint and model card to the chosen hub
    (``webui/publishing.py``: its address is the server's ``HF_ENDPOINT`` /
    ``MODELSCOPE_ENDPOINT``; the token stays in memory)."""

    def publish_run(run_id: str, repo_id: str, private: bool = False,
                    formats: list[str] | None = None, checkpoint: str = "", token: str = "",
                    dry_run: bool = False, existing: bool = False,
                    destination: str = "huggingface", request: gr.Request = None) -> dict:
        """Publish a run's LoRA (or full checkpoint) with its model card to the Hugging
        Face Hub or ModelScope (dry_run: the card and the files; nothing is sent)."""
        run = checked_run(run_id, request)
        user = who(request)
        try:
            if dry_run:
                staged = publishing.preview(run, repo_id, formats, checkpoint, token,
                                            destination)
                return {"sent": False, "repo_id": staged.repo_id,
                        "url": publishing.repo_url(staged.repo_id, destination),
                        "card": staged.card, "checkpoint": staged.checkpoint,
                        "files": publishing.files_of(staged)}
            done = publishing.publish(run, user, repo_id, private=private, formats=formats,
                                      checkpoint=checkpoint, token=token, existing=existing,
                                      destination=destination)
        except publishing.PublishError as e:
            raise _Fail(str(e.message)) from None
        except ConfigError as e:  # the run's settings file cannot be read
            raise _Fail(str(e)) from None
        return {"sent": True, "repo_id": str(repo_id).strip(), "url": done.url,
                "commit_url": done.commit_url, "files": publishing.files_of(done)}

    return (publish_run,)


def _add_fetch_output(where: SimpleNamespace, who: Callable):
    """``/fetch_output``: a file output needs components, so gradio serves the file and the
    client downloads it."""
    runner, workspace = where.runner, where.workspace

    def fetch_output(run_id: str, path: str, request: gr.Request = None):
        """Download one file of a run (``path`` relative to the run folder)."""
        user = who(request)
        try:
            real = security.registry_file(runner, run_id, path, user)
        except security.AccessDenied as e:
            raise _Fail(str(e)) from None
        return str(security.stage_download(real, workspace, user))

    with gr.Group(visible=False):
        run_box = gr.Textbox(visible=False, label="run_id")
        path_box = gr.Textbox(visible=False, label="path")
        file_out = gr.File(visible=False, label="file")
        trigger = gr.Button(visible=False)
    return trigger.click(fetch_output, [run_box, path_box], file_out,
                         api_name="fetch_output", show_progress="hidden")
