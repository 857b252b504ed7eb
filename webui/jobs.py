"""What the Results and Runs tabs ask of a finished run: render jobs, the sample grid,
downloads. Renders are runner jobs (a separate process); nothing here loads a model.
"""
from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path
from typing import Any

import yaml

from backend.config.validation import validate
from backend.core.messages import Msg
from backend.planning.plan import plan_render
from backend.core import rundir
from backend.core.rundir import ZIP_SKIP, RunDir, is_full_checkpoint, new_run_id
from backend.jobs.runner import Runner

STORED = (".safetensors", ".png", ".jpg", ".jpeg", ".webp", ".webm", ".mp4", ".zip")


def run_config(run: dict) -> dict[str, Any]:
    """The resolved config a run was started with (its run.yaml, as the history keeps it)."""
    data = yaml.safe_load(run.get("config_yaml") or "") or {}
    data.pop("schema_version", None)
    return data


def checkpoints(run: dict) -> list[Path]:
    """The run's checkpoints (step-N / epoch-N: LoRA files, or a full fine-tune's folders),
    oldest first."""
    rd = RunDir.of(run)
    return rd.checkpoints() if rd.output.is_dir() else []


def submit_render(runner: Runner, run: dict, settings: dict[str, Any], names: list[str],
                  owner: str | None) -> str:
    """Queue a sample-stage job that renders ``names`` (checkpoint file names of ``run``) with
    ``settings`` (sample_* fields) into a folder of its own under the run's samples/ (its own
    images and index: a later render with other prompts never relabels this one); returns
    the job's run id. Base images of earlier sets at the same settings are copied.

    The job has its own folder (run.yaml, log, progress) under {workspace}/runs, like any
    run, so it shows in the history and can be stopped.
    """
    known = {p.name: p for p in checkpoints(run)}
    missing = [n for n in names if n not in known]
    if missing or not names:
        raise ValueError(f"checkpoints: choose at least one checkpoint of run {run['id']} "
                         f"(got {missing or names}; allowed {', '.join(known) or 'none yet'})")
    base = run_config(run)
    base.update(settings)
    base.update(stages=["sample"], run_name=f"render {run.get('name') or run['id']}")
    cfg = validate(base)  # every sample_* problem at once, as the schema words it
    from backend.training.samples import checked_sample_inputs

    # What the sample stage refuses before it loads a model (a prompt of an edit or
    # image-to-video model without its input images), refused before the job is queued.
    checked_sample_inputs(cfg)
    job_id = new_run_id()
    job_dir = RunDir.new(runner.workspace, job_id).run_dir
    job_dir.mkdir(parents=True)
    files = RunDir.of(run)
    plan, cfg = plan_render(cfg, job_dir, files.render_dir(job_id), [known[n] for n in names],
                            reuse_base_from=files.sample_sets())
    return runner.submit_stages([plan], job_dir, cfg.to_yaml(), owner=owner,
                                name=cfg.run_name, gpu_ids=cfg.gpu_ids, run_id=job_id)


def submit_extract(runner: Runner, run: dict, name: str | None, rank: Any,
                   owner: str | None) -> str:
    """Queue the extraction of a LoRA of ``rank`` from the full checkpoint ``name`` of
    ``run`` (``backend/planning/extract_job.py``); returns the job's run id."""
    from backend.planning.extract_job import submit_extract as submit

    cfg = validate(run_config(run), require_inputs=False)
    return submit(runner, run, cfg, str(name or ""), owner=owner,
                  rank=int(rank) if rank not in (None, "") else None)


# ---------------------------------------------------------------------- grid
def _in(lang: str | None, msg: Msg) -> str:
    """``msg`` in the page's language (plain text: a caption or a choice)."""
    return msg.text(lang or "en")


def sample_sets(run: dict, lang: str | None = None) -> list[tuple[str, str]]:
    """(label, key) of each set of samples the run has, newest first: each render by its job
    id, then the run's own samples ("run"). The key picks the set in :func:`grid`."""
    files = RunDir.of(run)
    return [(_in(lang, Msg("results.set_run") if d == files.samples
                 else Msg("results.set_render", job=d.name)),
             "run" if d == files.samples else d.name) for d in files.sample_sets()]


def grid(run: dict, sample_set: str | None = None, lang: str | None = None
         ) -> tuple[list[tuple[str, str]], list[Msg | str], int]:
    """One set of the run's samples as a grid: (images row-major with captions in the page's
    language ``lang``, column titles (messages, the page renders them), number of columns).
    ``sample_set``: a key of :func:`sample_sets` (default: the newest set). Rows are
    prompts; the first column is the base model (scale 0), then each checkpoint × LoRA
    scale. A missing cell is left out of its row."""
    from backend.training.samples import read_index

    files = RunDir.of(run)
    keys = [k for _, k in sample_sets(run)]
    if sample_set not in keys:
        sample_set = keys[0] if keys else "run"
    samples = files.samples if sample_set == "run" else files.render_dir(sample_set)
    entries = [e for e in read_index(samples) if (samples / e.get("image", "")).is_file()]
    if not entries:
        return [], [], 0
    prompts = list(dict.fromkeys(e["prompt"] for e in sorted(
        entries, key=lambda e: (e.get("prompt_index", 0), e["prompt"]))))
    cols: list[tuple[str | None, float]] = []
    if any(e.get("checkpoint") is None for e in entries):
        cols.append((None, 0.0))

    def ckpt_key(e: dict) -> tuple:
        name = e.get("checkpoint_name") or ""
        digits = "".join(ch for ch in name if ch.isdigit())
        return (int(digits) if digits else 0, name, float(e.get("scale", 0)))

    for e in sorted((e for e in entries if e.get("checkpoint") is not None), key=ckpt_key):
        key = (e.get("checkpoint_name"), float(e.get("scale", 0)))
        if key not in cols:
            cols.append(key)
    cell = {}
    for e in entries:
        key = (None, 0.0) if e.get("checkpoint") is None else (e.get("checkpoint_name"),
                                                              float(e.get("scale", 0)))
        cell[(e["prompt"], key)] = e  # later entries (newer renders) win
    titles: list[Msg | str] = [Msg("results.base_model") if n is None else f"{n} × {s:g}"
                               for n, s in cols]
    # Edit runs: the prompt's input images first (the sample stage keeps a copy in the set).
    inputs = {e["prompt"]: e["input_image"] for e in entries
              if e.get("input_image") and (samples / e["input_image"]).is_file()}
    images = []
    for prompt in prompts:
        if inputs:
            if prompt in inputs:
                images.append((str(samples / inputs[prompt]),
                               _in(lang, Msg("results.input_caption", prompt=prompt))))
        for (n, s), title in zip(cols, titles):
            e = cell.get((prompt, (n, s)))
            if e is not None:
                images.append((str(samples / e["image"]), _in(lang, Msg(
                    "results.caption", title=title, seed=e.get("seed"), prompt=prompt))))
    if inputs:
        titles = [Msg("results.input_images")] + titles
    return images, titles, len(titles)


# ---------------------------------------------------------------------- downloads
def lora_download(run: dict, name: str | None, fmt: str) -> Path:
    """The chosen checkpoint (default: the latest) in ``fmt`` (exports: output/export/). A
    full fine-tune's checkpoint: ``diffusers`` is its folder as one zip (``from_pretrained``
    loads it unpacked); ``comfyui`` and ``reference`` one ``.safetensors`` file of the
    component (``backend.models.full_export``)."""
    found = checkpoints(run)
    if not found:
        raise ValueError(Msg("runs.no_checkpoint_yet", id=run["id"]))
    by_name = {p.name: p for p in found}
    src = by_name.get(name) if name else found[-1]
    if src is None:
        raise ValueError(Msg("runs.not_a_checkpoint", id=run["id"], got=name,
                             allowed=", ".join(by_name)))
    if is_full_checkpoint(src):
        if fmt != "diffusers":
            from backend.models.full_export import export_full  # as export_lora below

            return export_full(src, fmt, log=lambda _: None)
        return _zip([(p, f"{src.name}/{p.relative_to(src).as_posix()}")
                     for p in _files_under(src)],
                    src.parent / rundir.EXPORT / f"{run['id']}-{src.name}.zip")
    if fmt == "reference":
        return src
    from backend.models.export import export_lora  # torch: only when someone asks for an export

    return export_lora(src, fmt)


def _zip(paths: list[tuple[Path, str]], dest: Path) -> Path:
    from backend.core import writegate

    with writegate.UNRESTRICTED.replacing(dest, "zip", parents=True) as out, \
            zipfile.ZipFile(out, "w") as zf:
        for src, arc in paths:
            kind = zipfile.ZIP_STORED if src.suffix.lower() in STORED else zipfile.ZIP_DEFLATED
            zf.write(src, arc, compress_type=kind)
    return dest


def _files_under(root: Path, skip: tuple[str, ...] = ()) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        dirnames[:] = sorted(d for d in dirnames if (f"{rel_dir}/{d}" if rel_dir != "." else d)
                             not in skip)
        for f in sorted(filenames):
            p = Path(dirpath) / f
            if p.is_file() and not p.is_symlink() and not f.endswith(".tmp"):
                out.append(p)
    return out


def configs_zip(run: dict, out_dir: Path) -> Path:
    rd = RunDir.of(run)
    files = [(p, f"{run['id']}/{p.relative_to(rd.run_dir).as_posix()}")
             for p in rd.config_files()]
    return _zip(files, out_dir / f"{run['id']}-configs.zip")


def logs_zip(run: dict, out_dir: Path) -> Path:
    rd = RunDir.of(run)
    logs = sorted(rd.logs.glob("*.log")) if rd.logs.is_dir() else []
    files = [(p, f"{run['id']}/{p.relative_to(rd.run_dir).as_posix()}")
             for p in logs + ([rd.progress] if rd.progress.is_file() else [])]
    return _zip(files, out_dir / f"{run['id']}-logs.zip")


def run_zip(run: dict, out_dir: Path) -> Path:
    """The whole run folder (configs, logs, progress, LoRA checkpoints and exports, samples),
    without the stage-1 cache and the resume state."""
    root = Path(run["run_dir"])
    files = [(p, f"{run['id']}/{p.relative_to(root).as_posix()}")
             for p in _files_under(root, ZIP_SKIP)]
    return _zip(files, out_dir / f"{run['id']}.zip")


def history_rows(runs: list[dict], disk: dict[str, int] | None = None) -> list[list]:
    rows = []
    for r in runs:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"])) \
            if r.get("created_at") else ""
        started, ended = r.get("started_at"), r.get("ended_at")
        took = ""
        if started:
            from webui.context import human_seconds
            took = human_seconds((ended or time.time()) - started)
        stages = " → ".join(f"{s['name']}:{s['status']}" for s in r.get("stages", []))
        rows.append([r["id"], r.get("name") or "", r["status"], stages, created, took,
                     (r.get("failure_reason") or r.get("note") or "")[:160]])
    return rows


def sample_images(progress: dict) -> list[str]:
    """Image files the training run announced as samples (newest last)."""
    out = []
    for s in progress.get("samples", []):
        p = str(s.get("path") or "")
        if p.lower().endswith((".png", ".jpg", ".jpeg", ".webp", ".webm", ".mp4")) and \
                Path(p).is_file():  # video families' samples are clips
            out.append(p)
    return out
