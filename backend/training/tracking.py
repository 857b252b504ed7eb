"""Where a training run's metrics go: every tracker the run asks for, from one function.

``Trackers.start(cfg, out)`` opens them on the main process (the other ranks keep the
empty ``Trackers()``, which logs nothing); ``log(metrics, step)`` is the one place metrics
are logged, to each tracker in turn; ``log_samples(rendered, step)`` sends the samples
rendered during training; ``close()`` finishes them. The trackers:

- TensorBoard (``enable_tensorboard_log``, on by default; where the ``tensorboard``
  package is installed): ``tensorboard/``;
- a CSV file (``enable_csv_log``): ``metrics.csv``, the columns of ``CSV_COLUMNS``, a row
  per ``log`` (an optimizer step, or a validation);
- Weights & Biases (``enable_wandb_log``: ``wandb_project``, ``wandb_entity``,
  ``wandb_run_name``, ``wandb_mode``): its run in ``wandb/``;
- SwanLab (``enable_swanlab_log``: ``swanlab_project``, ``swanlab_workspace``,
  ``swanlab_run_name``, ``swanlab_mode``): its run in ``swanlab/``;

each in the output folder, beside the checkpoints (names from ``backend.core.rundir``).

The metrics (TensorBoard tags, W&B and SwanLab keys; ``CSV_COLUMNS`` maps them to columns):
``train/loss`` (the optimizer step's mean loss, as ``progress.jsonl`` has it), ``train/lr``,
``train/step_time_s`` (the step's micro-steps, without checkpoints, validation or samples),
``train/gpu_memory_gib`` and ``train/gpu_memory_peak_gib`` (CUDA only: allocated now, and
the most since the stage began), ``validation/loss`` (the held-out loss); the samples as
images under ``sample/prompt_<i>``, one per checkpoint and LoRA scale.

Keys: each service's own library reads its key from the environment (``WANDB_API_KEY``,
``SWANLAB_API_KEY``); nothing here reads, passes, writes or logs one, and the config sent
to a tracker holds no path of the server. A key given for one run (the page's
``wandb_key`` / ``swanlab_key``, ``online_trackers`` names them) reaches that run's stages
through their environment only (the runner's ``secret_env``). Offline (``wandb_mode`` /
``swanlab_mode`` ``offline``, or the library's own ``WANDB_MODE`` / ``SWANLAB_MODE``)
needs no key and no network: the run is written into its folder, to send later
(``wandb sync`` / ``swanlab sync``, the command is logged). Console capture is off in both (the stage's log
is its own).

A resumed run continues its tracker runs: the W&B and SwanLab run ids are chosen when the run
first trains and kept in ``tracker_runs.json`` beside the metrics; a later start in the same
output folder (Resume, a requeued job) opens them again with ``resume="allow"`` (offline,
the resumed part is a second folder with the same id, and ``sync`` sends both to one run).

``check_trackers(cfg)`` runs before any model loads: a tracker whose package is missing
refuses the run (``ConfigError`` naming the option and the package). A tracker that does
not start refuses it too (``StageError``, the library's reason); one that fails later is
dropped with a log line and training goes on.
"""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import secrets
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from backend.config.errors import ConfigError, field_problem
from backend.config.schema import PATH_FIELDS, RunConfig
from backend.core import rundir
from backend.core.messages import Msg
from backend.training.loop import StageError, log, one_line

# The metrics as CSV columns, in order (``step`` first).
CSV_COLUMNS = {"train/loss": "loss", "validation/loss": "val_loss", "train/lr": "lr",
               "train/step_time_s": "step_time_s", "train/gpu_memory_gib": "gpu_memory_gib",
               "train/gpu_memory_peak_gib": "gpu_memory_peak_gib"}
# Options of the config that never go to a tracker: the server's paths and folders.
NOT_SENT = set(PATH_FIELDS) | {"read_roots", "write_roots"}
GIB = 2 ** 30
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


def check_trackers(cfg: RunConfig) -> None:
    """Refuse the run when a tracker it asks for has no package here (every one named)."""
    problems = [field_problem(option, Msg("tracking.package_missing", tracker=title,
                                          package=package))
                for option, title, package in _asked(cfg)
                if importlib.util.find_spec(package) is None]
    if problems:
        raise ConfigError(problems)


@dataclass(frozen=True)
class OnlineTracker:
    """A tracker that sends a run's metrics as it trains, and where its key comes from."""
    option: str        # enable_wandb_log
    mode_option: str   # wandb_mode
    title: str
    key_env: str       # the variable its library reads the key from
    key_field: str     # the page's field for a key of this run alone


ONLINE = (OnlineTracker("enable_wandb_log", "wandb_mode", "Weights & Biases", "WANDB_API_KEY",
                        "wandb_key"),
          OnlineTracker("enable_swanlab_log", "swanlab_mode", "SwanLab", "SWANLAB_API_KEY",
                        "swanlab_key"))
MODE_ENV = {"wandb_mode": "WANDB_MODE", "swanlab_mode": "SWANLAB_MODE"}


def online_trackers(values: RunConfig | dict[str, Any]) -> list[OnlineTracker]:
    """The trackers a run (its config, or its saved YAML as a mapping) that trains switches
    on in online mode, which the library's own mode variable here does not make offline:
    those need a key."""
    get = values.get if isinstance(values, dict) else (lambda k: getattr(values, k, None))
    if "train" not in (get("stages") or ["train"]):
        return []
    return [t for t in ONLINE if get(t.option) is True and get(t.mode_option) != "offline"
            and os.environ.get(MODE_ENV[t.mode_option], "").strip().lower() != "offline"]


def _asked(cfg: RunConfig) -> list[tuple[str, str, str]]:
    """(option, title, package) of each service tracker the run switches on."""
    out = []
    if cfg.enable_wandb_log:
        out.append(("enable_wandb_log", "Weights & Biases", "wandb"))
    if cfg.enable_swanlab_log:
        out.append(("enable_swanlab_log", "SwanLab", "swanlab"))
    return out


def device_metrics(device: Any) -> dict[str, float]:
    """GPU memory on a CUDA ``device`` (GiB): allocated now and the stage's peak; nothing
    elsewhere. The peak is never reset (a benchmark reads it at the end)."""
    if getattr(device, "type", None) != "cuda":
        return {}
    import torch

    return {"train/gpu_memory_gib": torch.cuda.memory_allocated(device) / GIB,
            "train/gpu_memory_peak_gib": torch.cuda.max_memory_allocated(device) / GIB}


def run_name(cfg: RunConfig, out: Path, given: str | None) -> str:
    """A tracker's run name: the one given for it, else ``run_name``, else the run folder's
    name (the output folder's, outside a run folder)."""
    return given or cfg.run_name or (out.parent.name if out.name == rundir.OUTPUT else out.name)


def tracker_run_id(out: Path, tracker: str) -> str:
    """The id of ``tracker``'s run for the run whose output folder is ``out``: the one kept
    in ``tracker_runs.json`` (the run is resuming), else a new one (eight lowercase letters
    and digits, as both services make them), kept there."""
    path = out / rundir.TRACKER_RUNS
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        ids = {}
    if not isinstance(ids, dict):
        ids = {}
    if not isinstance(ids.get(tracker), str):
        ids[tracker] = "".join(secrets.choice(string.ascii_lowercase + string.digits)
                                 for _ in range(8))
        path.write_text(json.dumps(ids, indent=1), encoding="utf-8")
    return ids[tracker]


def sent_config(cfg: RunConfig) -> dict[str, Any]:
    """The options a tracker records with the run: all but the server's paths."""
    return {k: v for k, v in cfg.to_dict().items() if k not in NOT_SENT}


class Trackers:
    """The trackers of one run; empty (logs nothing) on the ranks other than the first."""

    def __init__(self, sinks: list | None = None):
        self.sinks = list(sinks or [])

    @classmethod
    def start(cls, cfg: RunConfig, out: Path) -> "Trackers":
        """Open every tracker ``cfg`` asks for in the output folder ``out``; a service
        tracker that does not start is a ``StageError``."""
        sinks: list = []
        tb = _TensorBoard.open(out / rundir.TENSORBOARD) if cfg.enable_tensorboard_log else None
        if tb is not None:
            sinks.append(tb)
        if cfg.enable_csv_log:
            sinks.append(_Csv(out / rundir.METRICS_CSV))
        trackers = cls(sinks)
        try:
            if cfg.enable_wandb_log:
                trackers.sinks.append(_Wandb(cfg, out))
            if cfg.enable_swanlab_log:
                trackers.sinks.append(_SwanLab(cfg, out))
        except StageError:
            trackers.close()
            raise
        if trackers.sinks:
            log("[train] " + Msg("tracking.logging_to", trackers=[
                Msg("tracking.where", tracker=s.title, path=str(s.path)) for s in trackers.sinks]))
        return trackers

    def log(self, metrics: dict[str, float], step: int) -> None:
        """The one place metrics go: to every tracker, at ``step``."""
        for sink in list(self.sinks):
            self._each(sink, step, lambda s: s.log(metrics, step))

    def log_samples(self, rendered: Iterable[tuple[Path, dict]], step: int) -> None:
        """Samples rendered at ``step`` (``(image file, its index entry)`` pairs): images
        under ``sample/prompt_<i>``; a clip is shown by its frame strip."""
        images = [(f"sample/prompt_{entry.get('prompt_index', 0)}", path, caption)
                  for path, entry, caption in _sample_images(rendered)]
        if images:
            for sink in list(self.sinks):
                self._each(sink, step, lambda s: s.images(images, step))

    def close(self) -> None:
        """Finish every tracker (an offline one logs how to send its run)."""
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            try:
                sink.close()
            except Exception as e:  # noqa: BLE001 - the run's files are already written
                log("[train] " + Msg("tracking.close_failed", tracker=sink.title,
                                     error=one_line(e, with_type=True)))

    def _each(self, sink, step: int, call) -> None:
        """Call ``call(sink)``; a tracker that fails is dropped (logged), training goes on."""
        try:
            call(sink)
        except Exception as e:  # noqa: BLE001 - a tracker never stops training
            log("[train] " + Msg("tracking.stopped", tracker=sink.title, step=step,
                                 error=one_line(e, with_type=True)))
            self.sinks.remove(sink)
            try:
                sink.close()
            except Exception:  # noqa: BLE001
                pass


def _sample_images(rendered: Iterable[tuple[Path, dict]]) -> list[tuple[Path, dict, str]]:
    out = []
    for path, entry in rendered:
        path = Path(path)
        if entry.get("strip") and entry.get("image"):  # a clip: its frame strip (an image)
            folder = path.parents[len(Path(entry["image"]).parts) - 1]  # both relative to it
            path = folder / entry["strip"]
        if path.suffix.lower() not in IMAGE_SUFFIXES or not path.is_file():
            continue
        caption = (f"{entry.get('checkpoint_name') or 'base'} x{float(entry.get('scale', 0)):g}"
                   f": {entry.get('prompt', '')}")
        out.append((path, entry, caption))
    return out


# ------------------------------------------------------------------------------ trackers
class _TensorBoard:
    title = "TensorBoard"

    def __init__(self, writer, path: Path):
        self.writer, self.path = writer, path

    @classmethod
    def open(cls, folder: Path) -> "_TensorBoard | None":
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            log("[train] " + Msg("tracking.tensorboard_missing"))
            return None
        return cls(SummaryWriter(log_dir=str(folder)), folder)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def images(self, images: list[tuple[str, Path, str]], step: int) -> None:
        import numpy as np
        from PIL import Image

        for n, (tag, path, _caption) in enumerate(images):
            with Image.open(path) as im:
                self.writer.add_image(f"{tag}/{n}", np.asarray(im.convert("RGB")), step,
                                      dataformats="HWC")

    def close(self) -> None:
        self.writer.close()


class _Csv:
    """``metrics.csv``: a header, then a row per ``log``; a resumed run appends."""
    title = "CSV"

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.is_file() or path.stat().st_size == 0
        self.file = open(path, "a", newline="", encoding="utf-8")
        self.writer = csv.DictWriter(self.file, ["step", *CSV_COLUMNS.values()])
        if new:
            self.writer.writeheader()
            self.file.flush()

    def log(self, metrics: dict[str, float], step: int) -> None:
        row = {column: repr(float(metrics[key])) for key, column in CSV_COLUMNS.items()
               if key in metrics}
        if row:
            self.writer.writerow({"step": step, **row})
            self.file.flush()

    def images(self, images, step: int) -> None:
        pass  # a CSV holds numbers; the samples are in the run's samples folder

    def close(self) -> None:
        self.file.close()


class _Wandb:
    """A W&B run in ``<out>/wandb`` (the library names that folder itself)."""
    title = "Weights & Biases"

    def __init__(self, cfg: RunConfig, out: Path):
        import wandb

        self.wandb = wandb
        self.path = out / rundir.WANDB
        out.mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(
                id=tracker_run_id(out, "wandb"), resume="allow",
                project=cfg.wandb_project, entity=cfg.wandb_entity,
                name=run_name(cfg, out, cfg.wandb_run_name), dir=str(out),
                # online: as the environment says (WANDB_MODE), else online
                mode="offline" if cfg.wandb_mode == "offline" else None,
                config=sent_config(cfg), reinit="finish_previous",
                settings=wandb.Settings(console="off", silent=True))
        except Exception as e:  # noqa: BLE001 - the library's own reason, said as such
            raise StageError(Msg("tracking.start_failed", option="enable_wandb_log",
                                 tracker=self.title, error=one_line(e),
                                 key_env="WANDB_API_KEY", mode_option="wandb_mode")) from None

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def images(self, images: list[tuple[str, Path, str]], step: int) -> None:
        by_tag: dict[str, list] = {}
        for tag, path, caption in images:
            by_tag.setdefault(tag, []).append(self.wandb.Image(str(path), caption=caption))
        self.run.log(by_tag, step=step)

    def close(self) -> None:
        offline = bool(getattr(self.run, "offline", False))
        folder = Path(self.run.dir).parent  # the run's own folder (its files/ inside)
        self.run.finish()
        # W&B's conveniences (the latest run, its logs, the service's log in the home
        # folder's cache) are symlinks: a run folder holds none (it moves; it is zipped)
        for link in [p for p in self.path.rglob("*") if p.is_symlink()]:
            link.unlink()
        if offline:
            log("[train] " + Msg("tracking.offline_sync", tracker=self.title,
                                 command=f"wandb sync {folder}"))


class _SwanLab:
    """A SwanLab run in ``<out>/swanlab``."""
    title = "SwanLab"

    def __init__(self, cfg: RunConfig, out: Path):
        import swanlab

        self.swanlab = swanlab
        self.path = out / rundir.SWANLAB
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            self.run = swanlab.init(
                id=tracker_run_id(out, "swanlab"), resume="allow",
                project=cfg.swanlab_project, workspace=cfg.swanlab_workspace,
                name=run_name(cfg, out, cfg.swanlab_run_name), log_dir=str(self.path),
                # online: as the environment says (SWANLAB_MODE), else online
                mode="offline" if cfg.swanlab_mode == "offline" else None,
                config=sent_config(cfg), reinit=True,
                settings=swanlab.Settings(terminal={"proxy_type": "none"}))
        except Exception as e:  # noqa: BLE001 - the library's own reason, said as such
            raise StageError(Msg("tracking.start_failed", option="enable_swanlab_log",
                                 tracker=self.title, error=one_line(e),
                                 key_env="SWANLAB_API_KEY",
                                 mode_option="swanlab_mode")) from None

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def images(self, images: list[tuple[str, Path, str]], step: int) -> None:
        by_tag: dict[str, list] = {}
        for tag, path, caption in images:
            by_tag.setdefault(tag, []).append(self.swanlab.Image(str(path), caption=caption))
        self.run.log(by_tag, step=step)

    def close(self) -> None:
        offline = getattr(self.run, "mode", None) == "offline"
        folder = Path(self.run.dir)
        self.run.finish()
        if offline:
            log("[train] " + Msg("tracking.offline_sync", tracker=self.title,
                                 command=f"swanlab sync {folder}"))
