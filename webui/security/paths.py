"""Which server paths a signed-in, non-admin user's run may name and read.

- ``check_run_paths(cfg, user, workspace, ...)``: a non-admin's run reads only their own
  datasets (``{workspace}/datasets/<user>/``, ``user_dataset_root``), the bundled demo, the
  server's models folder and their own runs; output locations, download mirrors and the
  read policy are not theirs to set. Called before every ``runner.submit``;
  ``check_resume_paths`` checks a run again, as its files are now, before it resumes.
  ``check_dataset_paths``: the same rule for the Dataset tab's reads and caption writes.
- ``with_file_policy(cfg, user, workspace, ...)``: the run config with its ``read_roots``
  and ``write_roots`` set, so the stages themselves refuse every file outside those folders
  when they open it (``backend.core.readgate``) or write it (``backend.core.writegate``); the check
  above is the early, friendly answer, the gates the rule.
- ``write_gate(user, workspace)``: the gate of the web server's own writes into a user's
  folders (Save captions, uploads): their own dataset folder for a signed-in user.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from backend.config.errors import field_problem
from backend.core import writegate
from backend.core.messages import Msg, said
from backend.core.rundir import RunDir
from backend.core.readgate import inside as _inside
from backend.core.readgate import under_any as _under_any
from webui.auth.passwords import USER_NAME
from webui.security.access import AccessDenied, _owner, policy
from webui.security.registry import _run_folder

REPO_ROOT = Path(__file__).resolve().parents[2]
DATASETS_DIR = "datasets"
MODELS_DIR_ENV = "ZEROLORA_MODELS_DIR"
# Set by the runner and the run plan for every run; never by users.
PLAN_ONLY_FIELDS = ("output_path", "progress_file", "offload_nvme_path")
PLAN_ONLY_DEFAULTS = {"output_path": "./models", "progress_file": None,
                      "offload_nvme_path": None}
MAX_DATASET_ENTRIES = 200_000
# Every option that names a server path (backend.config.schema.PATH_FIELDS and the model sources).
PATH_OPTIONS = ("output_path", "resume_from", "progress_file", "models_dir",
                "dataset_base_path", "dataset_metadata_path", "lora_checkpoint",
                "preset_lora_path", "offload_nvme_path", "model_id_with_origin_paths",
                "model_paths", "tokenizer_path", "captioner_path")


def user_dataset_root(workspace: str | os.PathLike, user: str | None) -> Path:
    """Where ``user``'s dataset folders live (uploads go here):
    ``{workspace}/datasets/<user>/`` for a signed-in user, ``{workspace}/datasets/`` with
    sign-in off (one local user)."""
    root = Path(workspace) / DATASETS_DIR
    if user is None:
        return root
    if not USER_NAME.match(str(user)):
        raise AccessDenied(field_problem("user", Msg("config.user_not_name", got=repr(user))))
    return root / str(user)


def _real(value: str | os.PathLike, base: Path) -> Path | None:
    """``value`` as an absolute path with every link followed (relative: against ``base``);
    None for text that is no path (a NUL character)."""
    try:
        p = Path(os.path.expanduser(os.fspath(value)))
        if not p.is_absolute():
            p = base / p
        return Path(os.path.realpath(p))
    except (ValueError, OSError):
        return None


def _linked(value: str | os.PathLike, base: Path) -> bool:
    """Whether following links changes where ``value`` points."""
    real = _real(value, base)
    if real is None:
        return False
    p = Path(os.path.expanduser(os.fspath(value)))
    if not p.is_absolute():
        p = base / p
    return Path(os.path.normpath(p)) != real


def _got(value: Any, base: Path | None = None) -> Msg:
    text = repr(value if isinstance(value, str) else str(value))
    if base is not None and isinstance(value, str) and value and _linked(value, base):
        return Msg("config.path.got_link", got=text)
    return Msg("config.path.got", got=text)


class _Roots:
    """The folders a signed-in, non-admin user's run may read from."""

    def __init__(self, user: str, workspace: Path, models_dir, repo_root: Path, runner: Any,
                 cwd: Path):
        self.cwd = cwd
        self.assets = Path(os.path.realpath(repo_root / "backend" / "assets"))
        # What a run at the default models_dir uses (see backend.config.paths.resolve_paths) and
        # the folder launch.py was given (it exports it as ZEROLORA_MODELS_DIR too).
        default_models = _real(os.environ.get(MODELS_DIR_ENV) or "./models", cwd)
        self.server_models = _real(models_dir, cwd) if models_dir else default_models
        self.models = list(dict.fromkeys([self.server_models, default_models, self.assets]))
        # The user's own datasets folder, unless it is a link (or leads out of datasets/).
        datasets = Path(os.path.realpath(workspace / DATASETS_DIR))
        own = user_dataset_root(workspace, user)
        self.user_datasets = own
        real_own = Path(os.path.realpath(own))
        self.datasets = [real_own] if not own.is_symlink() and \
            _inside(real_own, datasets) and real_own != datasets else []
        # The folders of the user's own runs, as the job registry knows them.
        self.runs: list[Path] = []
        if runner is not None:
            try:
                records = runner.list_runs(owner=user)
            except Exception:  # noqa: BLE001 - no registry: no runs to allow
                records = []
            for run in records:
                if _owner(run) != user:
                    continue
                try:
                    self.runs.append(_run_folder(runner, run)[1])
                except (AccessDenied, KeyError, OSError):
                    continue
        self.runs_text = (Msg("config.path.runs") if runner is not None
                          else Msg("config.path.no_registry"))

    @property
    def readable_data(self) -> list[Path]:
        return self.datasets + [self.assets] + self.runs

    @property
    def readable(self) -> list[Path]:
        """Every folder a run of this user may read: data, models, their runs."""
        return list(dict.fromkeys(self.readable_data + [m for m in self.models if m]))

    # Messages name the user's own folder, never other server paths (no probing for them).
    def data_text(self, write: bool = False) -> Msg:
        mine = Msg("config.path.own_folder", folder=str(self.user_datasets))
        if write:
            return mine
        return Msg("config.path.data_folders", own=mine)

    def models_text(self) -> Msg:
        return Msg("config.path.models_folders")


def _data_problems(base: Any, metadata: Any, roots: _Roots, write: bool,
                   keys: Iterable[str] = ("image",), shown: dict | None = None) -> list[Msg]:
    """``shown``: the values as the user gave them (for messages), by field name."""
    allowed = roots.datasets if write else roots.readable_data
    shown = shown or {}
    problems: list[Msg] = []
    for name, value in (("dataset_base_path", base), ("dataset_metadata_path", metadata)):
        if not value:
            continue
        if not _under_any(_real(value, roots.cwd), allowed):
            given = shown.get(name) or value
            problems.append(field_problem(name, Msg(
                "config.path.outside_datasets", got=_got(given, roots.cwd),
                allowed=roots.data_text(write))))
    if problems:
        return problems
    # Inside an allowed folder: links in it and files named by the metadata must stay inside.
    if base and os.path.isdir(_real(base, roots.cwd)):
        problems += _link_problems(_real(base, roots.cwd), allowed, roots, write)
    if metadata and not problems and os.path.isfile(_real(metadata, roots.cwd)):
        folder = _real(base, roots.cwd) if base else _real(metadata, roots.cwd).parent
        problems += _row_problems(_real(metadata, roots.cwd), folder, allowed, roots, write,
                                  keys)
    return problems


def _outside_link(folder: Path, allowed: list[Path], field: str) -> tuple[str | None, list[Msg]]:
    """The first link under ``folder`` that resolves outside ``allowed`` (relative path),
    or a problem for ``field`` when the folder holds too many entries to check."""
    seen = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            seen += 1
            if seen > MAX_DATASET_ENTRIES:
                return None, [field_problem(field, Msg("config.path.too_many_files",
                                                       n=MAX_DATASET_ENTRIES))]
            full = os.path.join(root, name)
            # A link that vanishes while it is looked at is gone: nothing to refuse.
            if os.path.islink(full) and not _under_any(_real(full, folder) or Path(full),
                                                       allowed):
                if os.path.lexists(full):
                    return os.path.relpath(full, folder), []
    return None, []


def _link_problems(folder: Path, allowed: list[Path], roots: _Roots, write: bool) -> list[Msg]:
    rel, problems = _outside_link(folder, allowed, "dataset_base_path")
    if rel is not None:
        return [field_problem("dataset_base_path", Msg(
            "config.path.link_outside", rel=repr(rel), allowed=roots.data_text(write)))]
    return problems


def _metadata_rows(meta: Path) -> list[Any]:
    import csv

    from backend.data.dataset import DatasetError, read_metadata_rows

    try:
        return read_metadata_rows(meta)
    except (OSError, ValueError, UnicodeDecodeError, csv.Error, DatasetError):
        return []  # unreadable: the stage refuses it on its own, reading nothing else


def _row_problems(meta: Path, folder: Path, allowed: list[Path], roots: _Roots, write: bool,
                  keys: Iterable[str]) -> list[Msg]:
    for i, row in enumerate(_metadata_rows(meta), 1):
        if i > MAX_DATASET_ENTRIES:
            break
        if not isinstance(row, dict):
            continue
        for key in keys:
            value = row.get(key)
            for item in (value if isinstance(value, list) else [value]):
                if not isinstance(item, str) or not item:
                    continue
                if not _under_any(_real(item, folder), allowed):
                    return [field_problem("dataset_metadata_path", Msg(
                        "config.path.row_outside", file=meta.name, row=i,
                        got=_got(item, folder), allowed=roots.data_text(write)))]
    return []


def _source_problem(field: str, entry: str, roots: _Roots, repo_root: Path) -> Msg | None:
    """One ``model_id:glob`` entry or local path, as the stages' hub code reads it (stages
    run in the repository root)."""
    local = Path(os.path.expanduser(entry))
    if not local.is_absolute():
        local = repo_root / local
    if os.path.lexists(local) or ":" not in entry:
        if _under_any(Path(os.path.realpath(local)), roots.models):
            return None
        return field_problem(field, Msg("config.path.local_outside_models",
                                        got=_got(entry, repo_root),
                                        allowed=roots.models_text()))
    model_id, pattern = entry.rsplit(":", 1)
    for part, text in (("model_id", model_id), ("glob", pattern)):
        parts = text.replace("\\", "/").split("/")
        if ".." in parts or text.startswith("~") or (part == "glob" and text.startswith("/")):
            return field_problem(field, Msg("config.path.dots_in_model_id", got=repr(entry))
                                 if part == "model_id" else
                                 Msg("config.path.dots_in_glob", got=repr(entry)))
    if model_id.startswith("/") and not _under_any(Path(os.path.realpath(model_id)),
                                                   roots.models):
        return field_problem(field, Msg("config.path.local_outside_models", got=_got(entry),
                                        allowed=roots.models_text()))
    return None


def check_run_paths(cfg: Any, user: str | None, workspace: str | os.PathLike,
                    admins: Iterable[str] | None = None,
                    models_dir: str | os.PathLike | None = None,
                    repo_root: str | os.PathLike = REPO_ROOT, *, runner: Any = None,
                    cwd: str | os.PathLike | None = None) -> list[Msg]:
    """What in run config ``cfg`` (a RunConfig or a mapping) ``user`` may not point at, as
    ``field: problem (got X; allowed Y)`` lines; empty: the run may start.

    Call it before ``runner.submit`` (the API's start_run does). With sign-in off (``user``
    None) and for admins nothing is restricted. Other users' runs read only:

    - ``dataset_base_path`` / ``dataset_metadata_path``: inside their own
      ``{workspace}/datasets/<user>/`` (where uploads go), the bundled demo dataset under
      ``backend/assets/``, or one of their runs (a stage-1 cache) -- after following links;
      links inside the folder and files named by the metadata must stay there too;
    - ``models_dir``: the server's models folder (``--models-dir``, else
      ``ZEROLORA_MODELS_DIR``, else ./models) or ``backend/assets``, or a folder inside one;
      local entries of ``model_id_with_origin_paths``, ``model_paths``, ``tokenizer_path``
      likewise; ``model_id:glob`` entries without ``..``, ``~`` or absolute globs;
    - ``lora_checkpoint`` / ``resume_from``: inside one of their own runs (``runner``'s
      registry; without a runner: refused);
    - ``preset_lora_path`` (an extra LoRA merged before training): where their datasets
      may be (an uploaded adapter) or inside one of their own runs;
    - ``output_path`` / ``progress_file`` / ``offload_nvme_path``: set by the run plan only
      (their defaults);
    - ``hub_endpoint``: empty (a download mirror is for admins).

    ``models_dir`` is the server's models folder (``launch.py --models-dir``); relative
    values resolve against ``cwd`` (default: this process's working folder), as the run
    plan resolves them.
    """
    unchecked = _unrestricted(user, admins)
    if unchecked is not None:
        return unchecked
    from backend.config.paths import resolve_paths
    from backend.config.validation import validate

    if isinstance(cfg, dict):
        cfg = validate(cfg, Msg("config.source.run_config"), require_inputs=False)
    base = Path(cwd or os.getcwd()).resolve()
    repo = Path(os.path.realpath(repo_root))
    workspace = Path(os.path.realpath(Path(workspace).expanduser()))
    try:
        roots = _Roots(user, workspace, models_dir, repo, runner, base)
    except AccessDenied as e:
        return [said(e)]
    nul = [field_problem(name, Msg("config.path.nul"))
           for name in (*PATH_OPTIONS, "hub_endpoint")
           if "\x00" in str(getattr(cfg, name, None) or "")]
    if nul:
        return nul
    try:
        resolved = resolve_paths(cfg, base)
    except (ValueError, OSError) as e:
        return [field_problem("model_paths", Msg("config.path.model_paths_unreadable",
                                                 why=str(e)))]
    problems = _server_set_problems(cfg)
    problems += _data_problems(
        resolved.dataset_base_path, resolved.dataset_metadata_path, roots, write=False,
        keys=("image", *[k.strip() for k in (cfg.data_file_keys or "").split(",")
                         if k.strip()]),
        shown={"dataset_base_path": cfg.dataset_base_path,
               "dataset_metadata_path": cfg.dataset_metadata_path})
    problems += _model_problems(cfg, resolved, roots, repo, base)
    problems += _run_file_problems(cfg, resolved, roots, base)
    from webui.security.quota import cache_problems

    return problems + cache_problems(runner, user)


def _server_set_problems(cfg: Any) -> list[Msg]:
    """The options only the run plan or the server sets (output locations, the download
    mirror, the read policy), when a user set them."""
    problems: list[Msg] = []
    for name in PLAN_ONLY_FIELDS:
        value = getattr(cfg, name)
        if value not in (PLAN_ONLY_DEFAULTS[name], None, ""):
            allowed = PLAN_ONLY_DEFAULTS[name] or Msg("config.path.empty")
            problems.append(field_problem(name, Msg(
                "config.path.admins_folder", got=_got(value), allowed=allowed)
                if name == "offload_nvme_path" else Msg(
                "config.path.set_by_plan", got=_got(value), allowed=allowed)))
    if cfg.hub_endpoint:
        problems.append(field_problem("hub_endpoint", Msg("config.path.mirror_admins",
                                                          got=_got(cfg.hub_endpoint))))
    for name in ("read_roots", "write_roots"):
        if getattr(cfg, name) is not None:
            problems.append(field_problem(name, Msg("config.path.set_by_server",
                                                    got=_got(str(getattr(cfg, name))))))
    return problems


def _model_problems(cfg: Any, resolved: Any, roots: _Roots, repo: Path,
                    base: Path) -> list[Msg]:
    """``models_dir`` and the model sources (``model_id_with_origin_paths``,
    ``tokenizer_path``, ``captioner_path``, ``model_paths``): inside the models folders."""
    problems: list[Msg] = []
    if not _under_any(_real(resolved.models_dir, base), roots.models):
        problems.append(field_problem("models_dir", Msg("config.path.not_models_dir",
                                                        got=_got(cfg.models_dir, base))))
    for entry in (resolved.model_id_with_origin_paths or "").split(","):
        if entry.strip():
            p = _source_problem("model_id_with_origin_paths", entry.strip(), roots, repo)
            if p:
                problems.append(p)
                break
    if resolved.tokenizer_path:
        p = _source_problem("tokenizer_path", resolved.tokenizer_path.strip(), roots, repo)
        if p:
            problems.append(p)
    if resolved.captioner_path:  # a captioning model: read like the model sources
        p = _source_problem("captioner_path", resolved.captioner_path.strip(), roots, repo)
        if p:
            problems.append(p)
    if resolved.model_paths:
        import json

        items = json.loads(resolved.model_paths)
        for item in items:
            bad = [x for x in (item if isinstance(item, list) else [item])
                   if not _under_any(_real(str(x), base), roots.models)]
            if bad:
                problems.append(field_problem("model_paths", Msg(
                    "config.path.model_file_outside", got=_got(str(bad[0]), base),
                    allowed=roots.models_text())))
                break
    return problems


def _run_file_problems(cfg: Any, resolved: Any, roots: _Roots, base: Path) -> list[Msg]:
    """``lora_checkpoint`` / ``resume_from`` inside the user's runs; ``preset_lora_path``
    inside their dataset folders or runs."""
    problems: list[Msg] = []
    for name in ("lora_checkpoint", "resume_from"):
        value = getattr(resolved, name)
        if value and not _under_any(_real(value, base), roots.runs):
            problems.append(field_problem(name, Msg(
                "config.path.not_in_runs", got=_got(getattr(cfg, name), base),
                allowed=roots.runs_text)))
    if resolved.preset_lora_path and not _under_any(_real(resolved.preset_lora_path, base),
                                                    roots.readable_data):
        problems.append(field_problem("preset_lora_path", Msg(
            "config.path.preset_lora_outside", got=_got(cfg.preset_lora_path, base),
            allowed=roots.data_text())))
    return problems


def _unrestricted(user: str | None, admins: Iterable[str] | None) -> list[Msg] | None:
    """The answer of a path check that has nothing to check: sign-in off (everything
    allowed), no user with sign-in on (refused), or an admin (everything allowed). None:
    ``user`` is restricted; check the paths."""
    if user is None:
        return [field_problem("user", Msg("config.path.sign_in"))] \
            if policy().auth_enabled else []
    if user in (policy().admins if admins is None else frozenset(admins)):
        return []
    return None


def check_dataset_paths(base: str | None, metadata: str | None, user: str | None,
                        workspace: str | os.PathLike, admins: Iterable[str] | None = None, *,
                        write: bool = False, runner: Any = None,
                        models_dir: str | os.PathLike | None = None,
                        repo_root: str | os.PathLike = REPO_ROOT,
                        cwd: str | os.PathLike | None = None) -> list[Msg]:
    """The dataset rule of ``check_run_paths`` alone, for the Dataset tab before it reads a
    folder (captions, thumbnails, checks) or, with ``write=True``, writes captions into it
    (then only the user's own ``{workspace}/datasets/<user>/`` is allowed)."""
    unchecked = _unrestricted(user, admins)
    if unchecked is not None:
        return unchecked
    here = Path(cwd or os.getcwd()).resolve()
    workspace = Path(os.path.realpath(Path(workspace).expanduser()))
    try:
        roots = _Roots(user, workspace, models_dir, Path(os.path.realpath(repo_root)), runner,
                       here)
    except AccessDenied as e:
        return [said(e)]
    if "\x00" in f"{base or ''}{metadata or ''}":
        return [field_problem("dataset_base_path", Msg("config.path.nul"))]
    return _data_problems(base or "", metadata or None, roots, write)


def check_resume_paths(runner: Any, run: dict, user: str | None,
                       workspace: str | os.PathLike, admins: Iterable[str] | None = None,
                       models_dir: str | os.PathLike | None = None,
                       repo_root: str | os.PathLike = REPO_ROOT) -> list[Msg]:
    """``check_run_paths`` again, before run ``run`` (a registry record ``user`` may access)
    continues: files may have changed since it started. Empty: it may resume.

    What the resumed stages read is checked as it is on disk now: the run's folder (not a
    link), its ``run.yaml`` (a regular file; the stored config when the run has none) by the
    rules of ``check_run_paths`` -- its run-folder ``output_path`` / ``progress_file`` are
    the plan's and stay allowed while they lead inside the folder -- and every link inside
    the run's folder (the saved state, the stage-1 cache), which must stay inside it.
    """
    unchecked = _unrestricted(user, admins)
    if unchecked is not None:
        return unchecked
    from backend.core import bounded
    from backend.config.errors import ConfigError

    try:
        _, run_dir = _run_folder(runner, run)
    except AccessDenied as e:
        return [field_problem("run_dir", said(e))]
    yaml_file = RunDir.of(run).run_yaml
    name = yaml_file.name
    if os.path.lexists(yaml_file) and (yaml_file.is_symlink() or not yaml_file.is_file()):
        return [field_problem(name, Msg("config.path.run_yaml_not_file", run=run["id"]))]
    try:
        # Bounded: size, nesting and what YAML aliases expand to (backend/core/bounded.py).
        text = bounded.read_text(yaml_file, name) if yaml_file.is_file() else \
            run.get("config_yaml") or ""
        data = bounded.load_yaml(text, name) or {}
    except bounded.LimitExceeded as e:
        return [said(e)]
    except (OSError, ValueError) as e:  # UnicodeDecodeError, bounded.ParseError
        what = Msg("config.path.not_valid_yaml") if isinstance(e, bounded.ParseError) \
            else type(e).__name__
        return [field_problem(name, Msg("config.path.run_yaml_unreadable", what=what))]
    if not isinstance(data, dict):
        return [field_problem(name, Msg("config.path.run_yaml_not_mapping",
                                        type=type(data).__name__))]
    data = dict(data)
    # The read policy the server gave the run at its start (the resumed stages keep it).
    data.pop("read_roots", None)
    data.pop("write_roots", None)
    # Where the plan put this run's outputs: allowed while it leads inside the run's folder.
    for name in ("output_path", "progress_file"):
        value = data.get(name)
        if isinstance(value, str) and value and "\x00" not in value and \
                _inside(Path(os.path.realpath(value)), run_dir):
            data[name] = PLAN_ONLY_DEFAULTS[name]
    try:
        problems = check_run_paths(data, user, workspace, admins, models_dir, repo_root,
                                   runner=runner)
    except ConfigError as e:
        return list(e.problems)
    return problems + _run_link_problems(run, run_dir)


def _run_link_problems(run: dict, run_dir: Path) -> list[Msg]:
    rel, problems = _outside_link(run_dir, [run_dir], "run_dir")
    if rel is not None:
        return [field_problem("run_dir", Msg("config.path.run_link_outside", rel=repr(rel),
                                             run=run["id"]))]
    return problems


def with_file_policy(cfg: Any, user: str | None, workspace: str | os.PathLike,
                     admins: Iterable[str] | None = None,
                     models_dir: str | os.PathLike | None = None,
                     repo_root: str | os.PathLike = REPO_ROOT, *, runner: Any = None,
                     cwd: str | os.PathLike | None = None) -> Any:
    """``cfg`` (a RunConfig that passed ``check_run_paths``) as ``user``'s run carries it:
    for a signed-in non-admin, ``read_roots`` lists the folders the run's stages may read
    (their dataset folder, the bundled assets, the server's models folder, their runs'
    folders); the stages refuse every other file when they open it (``backend.core.readgate``;
    the run's own folder is always readable). Sign-in off and admins: ``cfg`` unchanged.

    ``write_roots`` likewise lists the folders the stages may write into besides the run's
    own folder: the user's own dataset folder only (a caption job writes there); the
    bundled assets, the models folder and other users' folders stay read-only
    (``backend.core.writegate``).

    Call it between the check and ``runner.submit`` (the API's start_run and the Run tab
    do), so no later change on disk (an upload into a folder the run names, a link planted
    after the check) lets the run read or write what the check would have refused.
    """
    if _unrestricted(user, admins) is not None:
        return cfg
    base = Path(cwd or os.getcwd()).resolve()
    workspace = Path(os.path.realpath(Path(workspace).expanduser()))
    roots = _Roots(user, workspace, models_dir, Path(os.path.realpath(repo_root)), runner, base)
    return cfg.model_copy(update={"read_roots": [str(r) for r in roots.readable],
                                  "write_roots": [str(r) for r in roots.datasets]})


def write_gate(user: str | None, workspace: str | os.PathLike,
               admins: Iterable[str] | None = None) -> "writegate.WriteGate":
    """The gate of the web server's own writes into folders a user names (Save captions):
    sign-in off and admins anywhere, a signed-in non-admin inside their own
    ``{workspace}/datasets/<user>/`` only, nobody with sign-in on and no user. Every write
    through it is link-safe (``backend.core.writegate``)."""
    unchecked = _unrestricted(user, admins)
    if unchecked == []:
        return writegate.UNRESTRICTED
    if unchecked is not None:
        return writegate.gate_of([])
    return writegate.gate_of([user_dataset_root(workspace, user)])

