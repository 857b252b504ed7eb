"""The run-directory layout: the one module that names a run's files and folders.

A run folder is frozen and self-describing. Every other module asks ``RunDir`` for a path
instead of spelling a name (a layering test scans ``backend/`` and ``webui/`` for the names
below and fails on any other module that writes one)::

    {workspace}/runs/<run_id>/           runs_root(workspace) / run_id
        run.yaml                         the resolved config every stage reads (--config)
        accelerate_<stage>.yaml          accelerate's launch config per launched stage
        deepspeed_<stage>.json           DeepSpeed's config (stages under ZeRO)
        commands.sh                      the exact commands, shell-quoted, for people
        slurm.sbatch                     the SLURM job script (a run sent to SLURM)
        logs/<stage>.log                 each stage's stdout and stderr (appended per attempt)
        logs/supervisor.log              the run's supervisor process
        progress.jsonl                   progress events (backend/core/progress.py)
        cache/                           the stage-1 cache (backend/data/cache.py)
        classes/                         class images the base model rendered from class_prompt
                                         (prior preservation; backend/training/class_images.py)
        output/                          LoRA checkpoints: step-<N>.safetensors, epoch-<N>...
                                         (their EMA twins step-<N>-ema.safetensors ...)
        output/state/                    the full training state, for resume
        output/export/                   checkpoints in other key formats (backend/models/export.py)
        output/tensorboard/              TensorBoard events
        output/metrics.csv               the metrics as CSV (enable_csv_log)
        output/wandb/                    Weights & Biases' run files (enable_wandb_log)
        output/swanlab/                  SwanLab's run files (enable_swanlab_log)
        output/training_args.json        the arguments of the train stage
        samples/                         rendered samples and their index.json
        captioned.txt                    a caption job: the images it has captioned (resume)
        downloads/                       zips built for a person (configs, logs, the run)

The whole-run zip leaves out ``ZIP_SKIP`` (the cache and resume state can be many GB and a
new run rebuilds them). A run folder a caller chose outside ``runs/`` is deleted file by file:
only ``ARTIFACTS`` (what a run writes there) go.

    rd = RunDir("/ws/runs/20250101-120000-abc123")
    rd.run_yaml, rd.log("train"), rd.accelerate_yaml("train"), rd.state
"""
from __future__ import annotations

import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

# ---------------------------------------------------------------------------- names
# Files in the run folder. "{stage}" stands for a stage name (data_process, train, sample).
RUN_YAML = "run.yaml"
COMMANDS = "commands.sh"
SBATCH = "slurm.sbatch"  # the sbatch script of a run sent to SLURM (backend/jobs/slurm.py)
PROGRESS = "progress.jsonl"
ACCELERATE_YAML = "accelerate_{stage}.yaml"
DEEPSPEED_JSON = "deepspeed_{stage}.json"
# Folders in the run folder.
LOGS = "logs"
CACHE = "cache"
CLASSES = "classes"  # class images rendered from class_prompt (stage class_images)
OUTPUT = "output"
SAMPLES = "samples"
DOWNLOADS = "downloads"
# Inside logs/.
STAGE_LOG = "{stage}.log"
SUPERVISOR = "supervisor"  # the supervisor's log is logs/supervisor.log (never a stage name)
# Inside output/.
STATE = "state"
EXPORT = "export"
TENSORBOARD = "tensorboard"
# The trackers (backend/training/tracking.py): the metrics CSV, and the folders of W&B
# (it names its folder itself inside the one it is given) and SwanLab.
METRICS_CSV = "metrics.csv"
WANDB = "wandb"
SWANLAB = "swanlab"
TRACKER_RUNS = "tracker_runs.json"
TRAINING_ARGS = "training_args.json"
CHECKPOINT_SUFFIX = ".safetensors"
CHECKPOINT_KINDS = ("step", "epoch")
CHECKPOINT_RE = re.compile(r"^(?P<kind>step|epoch)-(?P<n>\d+)\.safetensors$")
# A full fine-tune's checkpoint is a folder ``step-N/`` / ``epoch-N/`` (the trained component
# in diffusers layout) holding this record of itself (``backend/models/full.py``).
FULL_CHECKPOINT_RE = re.compile(r"^(?P<kind>step|epoch)-(?P<n>\d+)$")
FULL_CHECKPOINT_INFO = "zerolora_checkpoint.json"
# The EMA twin of a checkpoint (``ema_decay``): ``step-N-ema.safetensors`` beside
# ``step-N.safetensors`` (a LoRA file like any other), ``step-N-ema/`` beside a full
# fine-tune's ``step-N/``. Twins are not checkpoints of their own: ``list_checkpoints``
# leaves them out, ``ema_twin`` names them. The resume state keeps the EMA in
# ``state/ema.safetensors`` (ZeRO-3 full fine-tune: one shard a rank, ``ema-rank<r>``).
EMA_TAG = "-ema"
EMA_CHECKPOINT_RE = re.compile(r"^(?P<kind>step|epoch)-(?P<n>\d+)-ema(\.safetensors)?$")
EMA_STATE = "ema.safetensors"
EMA_STATE_SHARD = "ema-rank{rank}.safetensors"
# Inside samples/.
SAMPLES_INDEX = "index.json"
RENDERS = "renders"  # samples/renders/<job id>/: one Results-tab render, with its own index
# A caption job's journal: one image per line, those it has captioned (a resumed job skips
# them).
CAPTION_JOURNAL = "captioned.txt"
# In the workspace.
RUNS = "runs"
# In runs/: the SLURM storage probe (backend/jobs/slurm_runs.py): its job script, the job's
# log and the file the job writes on a node, named by the probe's token.
STORAGE_PROBE = ".storage_probe"
PROBE_SCRIPT = "probe.sbatch"
PROBE_LOG = "probe.log"
PROBE_ANSWER = "answer-{token}.txt"

# Left out of the whole-run zip (paths relative to the run folder).
ZIP_SKIP = (CACHE, f"{OUTPUT}/{STATE}", DOWNLOADS)
# What a run writes into its folder (globs): deleted with a run whose folder is not its own.
ARTIFACTS = (LOGS, CACHE, CLASSES, OUTPUT, SAMPLES, PROGRESS, RUN_YAML, COMMANDS, SBATCH,
             CAPTION_JOURNAL,
             ACCELERATE_YAML.format(stage="*"), DEEPSPEED_JSON.format(stage="*"))

# Every name above that a test looks for outside this module: file names (matched inside
# any string) and folder names (matched as a path component).
FILE_NAMES = (RUN_YAML, COMMANDS, SBATCH, PROGRESS, ACCELERATE_YAML, DEEPSPEED_JSON, TRAINING_ARGS,
              SAMPLES_INDEX, f"{SUPERVISOR}.log", CAPTION_JOURNAL, EMA_STATE, EMA_STATE_SHARD)
FOLDER_NAMES = (RUNS, LOGS, CACHE, OUTPUT, SAMPLES, DOWNLOADS, STATE, EXPORT, TENSORBOARD)
FILE_NAMES += (METRICS_CSV, TRACKER_RUNS)
FOLDER_NAMES += (WANDB, SWANLAB)
FOLDER_NAMES += (CLASSES,)


def new_run_id() -> str:
    """A new run's id, which names its folder: ``<yyyymmdd>-<hhmmss>-<6 hex digits>``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def runs_root(workspace: str | os.PathLike) -> Path:
    """``{workspace}/runs``: where the runner makes a folder per run."""
    return Path(workspace) / RUNS


@dataclass(frozen=True)
class ProbeFiles:
    """The SLURM storage probe's files, in the runs folder the nodes must share:
    ``{workspace}/runs/.storage_probe/``."""

    folder: Path

    @classmethod
    def of(cls, workspace: str | os.PathLike) -> "ProbeFiles":
        return cls(runs_root(workspace) / STORAGE_PROBE)

    @property
    def script(self) -> Path:
        return self.folder / PROBE_SCRIPT

    @property
    def log(self) -> Path:
        return self.folder / PROBE_LOG

    def answer(self, token: str) -> Path:
        return self.folder / PROBE_ANSWER.format(token=token)


def workspace_downloads(workspace: str | os.PathLike) -> Path:
    """``{workspace}/downloads``: files staged for the browser (outside every run folder)."""
    return Path(workspace) / DOWNLOADS


def checkpoint_name(kind: str, n: int) -> str:
    """``step-<n>.safetensors`` or ``epoch-<n>.safetensors``."""
    if kind not in CHECKPOINT_KINDS:
        raise ValueError(f"kind: a checkpoint kind (got {kind!r}; allowed "
                         f"{', '.join(CHECKPOINT_KINDS)})")
    return f"{kind}-{int(n)}{CHECKPOINT_SUFFIX}"


def ema_twin(checkpoint: str | os.PathLike) -> Path:
    """The EMA twin of a checkpoint: ``step-N.safetensors`` -> ``step-N-ema.safetensors``,
    a folder ``step-N`` -> ``step-N-ema`` (a twin is its own twin)."""
    p = Path(checkpoint)
    if is_ema_twin(p):
        return p
    if p.name.endswith(CHECKPOINT_SUFFIX):
        return p.with_name(p.name[: -len(CHECKPOINT_SUFFIX)] + EMA_TAG + CHECKPOINT_SUFFIX)
    return p.with_name(p.name + EMA_TAG)


def is_ema_twin(path: str | os.PathLike) -> bool:
    """Whether ``path`` is named as a checkpoint's EMA twin."""
    return bool(EMA_CHECKPOINT_RE.match(Path(path).name))


def is_full_checkpoint(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a full fine-tune's checkpoint folder."""
    return (Path(path) / FULL_CHECKPOINT_INFO).is_file()


def checkpoint_of(path: str | os.PathLike) -> tuple[str, int] | None:
    """(kind, N) of a checkpoint: a LoRA file ``step-N.safetensors`` / ``epoch-N...``, or a
    full fine-tune's folder ``step-N/``; None for anything else (an EMA twin included)."""
    p = Path(path)
    m = CHECKPOINT_RE.match(p.name)
    if m and p.is_file():
        return m["kind"], int(m["n"])
    m = FULL_CHECKPOINT_RE.match(p.name)
    if m and is_full_checkpoint(p):
        return m["kind"], int(m["n"])
    return None


def list_checkpoints(folder: str | os.PathLike) -> list[Path]:
    """``step-N`` / ``epoch-N`` checkpoints directly in ``folder`` (LoRA files, or a full
    fine-tune's folders), oldest first (empty when
    the folder does not exist). When both kinds are there, the order they were written in."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for p in folder.iterdir():
        of = checkpoint_of(p)
        if of is not None:
            found.append((*of, p))
    if len({k for k, _, _ in found}) > 1:
        found.sort(key=lambda t: (t[2].stat().st_mtime_ns, t[0] == "step", t[1]))
    else:
        found.sort(key=lambda t: t[1])
    return [p for _, _, p in found]


# ---------------------------------------------------------------------------- a run folder
@dataclass
class RunDir:
    """Where a run's files live inside its folder (paths only; nothing is created)."""

    run_dir: Path

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir)

    @classmethod
    def new(cls, workspace: str | os.PathLike, run_id: str) -> "RunDir":
        """The folder of a new run in the workspace (``{workspace}/runs/<run_id>``)."""
        return cls(runs_root(workspace) / run_id)

    @classmethod
    def of(cls, run: dict) -> "RunDir":
        """The folder of a run's history record (``run["run_dir"]``)."""
        return cls(Path(run["run_dir"]))

    # -- files of the run folder
    @property
    def run_yaml(self) -> Path:
        return self.run_dir / RUN_YAML

    @property
    def commands(self) -> Path:
        return self.run_dir / COMMANDS

    @property
    def sbatch(self) -> Path:
        """``slurm.sbatch``: the run's SLURM job script (runs sent to SLURM only)."""
        return self.run_dir / SBATCH

    @property
    def progress(self) -> Path:
        return self.run_dir / PROGRESS

    def accelerate_yaml(self, stage: str) -> Path:
        return self.run_dir / ACCELERATE_YAML.format(stage=stage)

    def deepspeed_json(self, stage: str) -> Path:
        return self.run_dir / DEEPSPEED_JSON.format(stage=stage)

    def accelerate_yamls(self) -> list[Path]:
        """Every accelerate YAML in the folder, by name."""
        return sorted(self.run_dir.glob(ACCELERATE_YAML.format(stage="*")))

    def deepspeed_jsons(self) -> list[Path]:
        """Every DeepSpeed JSON in the folder, by name."""
        return sorted(self.run_dir.glob(DEEPSPEED_JSON.format(stage="*")))

    def config_files(self) -> list[Path]:
        """The run's configs and commands that exist: run.yaml, commands.sh, then the
        accelerate YAMLs and the DeepSpeed JSONs."""
        files = [self.run_yaml, self.commands, self.sbatch] + self.accelerate_yamls() + \
            self.deepspeed_jsons()
        return [p for p in files if p.is_file()]

    # -- logs
    @property
    def logs(self) -> Path:
        return self.run_dir / LOGS

    def log(self, stage: str) -> Path:
        """``logs/<stage>.log``."""
        return self.logs / STAGE_LOG.format(stage=stage)

    @staticmethod
    def log_relpath(stage: str) -> str:
        """``logs/<stage>.log`` as text, for messages."""
        return f"{LOGS}/{STAGE_LOG.format(stage=stage)}"

    @property
    def supervisor_log(self) -> Path:
        return self.log(SUPERVISOR)

    def log_files(self) -> list[Path]:
        """Every log in ``logs/``, by name."""
        return sorted(self.logs.glob(STAGE_LOG.format(stage="*")))

    # -- folders
    @property
    def cache(self) -> Path:
        return self.run_dir / CACHE

    @property
    def classes(self) -> Path:
        """``classes/``: the class images rendered from ``class_prompt`` (prior
        preservation), read by stage 1 beside ``class_data_path``."""
        return self.run_dir / CLASSES

    @property
    def output(self) -> Path:
        return self.run_dir / OUTPUT

    @property
    def state(self) -> Path:
        """``output/state``: the training state a resumed run continues from."""
        return self.output / STATE

    def has_state(self) -> bool:
        """Whether a training state was saved (a train stage can resume)."""
        return self.state.is_dir() and any(self.state.iterdir())

    @property
    def export(self) -> Path:
        return self.output / EXPORT

    @property
    def tensorboard(self) -> Path:
        return self.output / TENSORBOARD

    @property
    def training_args(self) -> Path:
        return self.output / TRAINING_ARGS

    @property
    def samples(self) -> Path:
        return self.run_dir / SAMPLES

    @property
    def samples_index(self) -> Path:
        return self.samples / SAMPLES_INDEX

    def extracted_lora(self, checkpoint: str, rule: str) -> Path:
        """The LoRA extracted from the full checkpoint ``checkpoint`` (``step-N``) by
        ``rule`` (``r64``: rank 64, ``e90``: 90 % of the energy)."""
        return self.export / f"{checkpoint}-lora-{rule}{CHECKPOINT_SUFFIX}"

    def render_dir(self, job_id: str) -> Path:
        """Where one render job of this run writes its images and index."""
        return self.samples / RENDERS / job_id

    def sample_sets(self) -> list[Path]:
        """Folders holding a sample index: each render (newest first, by job id), then the
        samples the run itself rendered."""
        renders = self.samples / RENDERS
        found = sorted((d for d in renders.iterdir() if (d / SAMPLES_INDEX).is_file()),
                       key=lambda d: d.name, reverse=True) if renders.is_dir() else []
        return found + ([self.samples] if self.samples_index.is_file() else [])

    @property
    def caption_journal(self) -> Path:
        """A caption job's list of the images it has captioned."""
        return self.run_dir / CAPTION_JOURNAL

    @property
    def downloads(self) -> Path:
        """Where zips of the run are built: inside its folder, so deleting the run removes
        them and the run registry serves them."""
        return self.run_dir / DOWNLOADS

    def checkpoints(self) -> list[Path]:
        """The run's LoRA checkpoints in ``output/``, oldest first."""
        return list_checkpoints(self.output)

    def artifacts(self) -> list[Path]:
        """What a run wrote into its folder (see ``ARTIFACTS``)."""
        return [p for pattern in ARTIFACTS for p in sorted(self.run_dir.glob(pattern))]


