"""A finished run of the tiny model, written as the stages write it (``backend/core/rundir.py``'s
names), for publishing it (``tests/test_publish.py``, ``tests/test_publish_ui.py``): its
settings, progress events, two real LoRA checkpoints with the metadata training writes (the
base model's server path among it), the training arguments, samples with their index, logs.
``planted``: a secret written into the files that must never be sent (the resume state and a
log), to show the publisher leaves them out. ``full``: a full fine-tune's run instead, its
checkpoint ``step-2/`` the tiny transformer saved as training saves it
(``backend.models.full.save_component``, its record naming the base model's server path).

``forbidden`` and ``assert_nothing_of_the_server`` are the checks every hub's test makes on
every byte that arrived (each local hub's ``arrived()``)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from backend.config.schema import RunConfig
from backend.core.rundir import RunDir
from tests.harness.loras import QWEN_IMAGE_TARGETS, RANK, make_reference_lora

PROMPTS = ["zlr style, a red circle", "zlr style, a blue square"]
T0 = 1_767_000_000.0


def forbidden(run_folder: Path, models_root: Path, demo_dataset: Path,
              token: str) -> dict[str, str]:
    """What must never arrive at a hub, by what it is (computed here, not by the code under
    test)."""
    home = os.path.expanduser("~")
    return {"run folder": str(run_folder), "run folder (resolved)": str(run_folder.resolve()),
            "workspace": str(run_folder.parent.parent), "models folder": str(models_root),
            "dataset": str(demo_dataset), "home folder": home, "token": token}


def assert_nothing_of_the_server(arrived: dict[str, bytes],
                                 forbidden: dict[str, str]) -> None:
    """No byte that arrived (by where) holds any of ``forbidden`` (by what)."""
    assert arrived, "nothing arrived"
    for where, data in arrived.items():
        for what, text in forbidden.items():
            assert text.encode() not in data, f"{what} in {where}"


def write_finished_run(rd: RunDir, tiny_model_dir: Path, models_root: Path,
                       demo_dataset: Path, planted: str | None = None,
                       full: bool = False) -> Path:
    """Fill the new folder ``rd.run_dir`` with a finished run; returns the folder."""
    from PIL import Image

    from backend.models.lora import save_lora

    rd.run_dir.mkdir(parents=True, exist_ok=True)
    cfg = RunConfig(models_dir=str(models_root), offline=True,
                    dataset_base_path=str(demo_dataset),
                    dataset_metadata_path=str(demo_dataset / "metadata.csv"),
                    output_path=str(rd.output), progress_file=str(rd.progress),
                    trigger_word="zlr style", sample_prompts=PROMPTS, lora_rank=RANK,
                    max_train_steps=2, learning_rate=2e-4, sample_seed=7,
                    trainable_models="dit" if full else None)
    cfg.save(rd.run_yaml)
    rd.output.mkdir()
    if full:
        ckpt = _full_checkpoint(rd.output / "step-2", tiny_model_dir)
    else:
        ckpt = rd.output / "step-2.safetensors"
        sd = make_reference_lora(tiny_model_dir, ckpt)
        save_lora(ckpt, sd, rank=RANK, target_modules=QWEN_IMAGE_TARGETS.split(","),
                  extra={"step": 2, "base_model_path": str(tiny_model_dir / "transformer")})
        # an older checkpoint, to choose from
        save_lora(rd.output / "step-1.safetensors", {k: v * 0.5 for k, v in sd.items()},
                  rank=RANK, target_modules=QWEN_IMAGE_TARGETS.split(","))
        os.utime(rd.output / "step-1.safetensors", (1, 1))
    rd.training_args.write_text(json.dumps({
        **cfg.to_dict(), "resolved_components": {
            "transformer": str(tiny_model_dir / "transformer")}}), encoding="utf-8")
    rd.state.mkdir()
    (rd.state / "optimizer.bin").write_bytes(b"state " + (planted or "").encode())
    rd.logs.mkdir(exist_ok=True)
    rd.log("train").write_text(f"[train] saved {ckpt}\n" +
                               (f"HF_TOKEN={planted}\n" if planted else ""), encoding="utf-8")
    events = [
        {"time": T0, "stage": "data_process", "event": "start", "total": 4},
        {"time": T0 + 5, "stage": "data_process", "event": "end", "status": "succeeded"},
        {"time": T0 + 10, "stage": "train", "event": "start", "total": 2, "epochs": 1,
         "step": 0, "steps_per_epoch": 2, "num_processes": 1, "batch_size": 2},
        {"time": T0 + 40, "stage": "train", "event": "step", "step": 1, "total": 2,
         "epoch": 0, "loss": 0.31},
        {"time": T0 + 70, "stage": "train", "event": "step", "step": 2, "total": 2,
         "epoch": 0, "loss": 0.27},
        {"time": T0 + 71, "stage": "train", "event": "checkpoint", "step": 2,
         "path": str(ckpt)},
        {"time": T0 + 75, "stage": "train", "event": "end", "status": "succeeded"},
    ]
    rd.progress.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    images = []
    for i, prompt in enumerate(PROMPTS):
        for name, scale, colour in (("base", 0.0, (90, 90, 90)), ("step-2", 1.0, (200, 40, 40)),
                                    ("step-1", 1.0, (40, 40, 200))):
            rel = f"{name}/p{i:02d}-seed7.png" if name == "base" else \
                f"{name}/p{i:02d}-x1-seed7.png"
            (rd.samples / rel).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (16, 16), colour).save(rd.samples / rel)
            images.append({"prompt": prompt, "prompt_index": i,
                           "checkpoint": None if name == "base" else
                           str(rd.output / (name if full else f"{name}.safetensors")),
                           "checkpoint_name": name, "scale": scale, "image": rel, "seed": 7,
                           "steps": 4, "cfg": 4.0, "height": 16, "width": 16,
                           "base_model": str(tiny_model_dir / "transformer")})
    rd.samples_index.write_text(json.dumps({"version": 1, "images": images}), encoding="utf-8")
    return rd.run_dir


def _full_checkpoint(folder: Path, tiny_model_dir: Path) -> Path:
    """The tiny Qwen-Image transformer (random, seed 0) saved as a full fine-tune's
    checkpoint in two shards, its record naming the base model's folder on this server."""
    import torch
    from diffusers import QwenImageTransformer2DModel

    from backend.families.qwen_image.tiny import TRANSFORMER_CONFIG
    from backend.models import full

    torch.manual_seed(0)
    model = QwenImageTransformer2DModel(**TRANSFORMER_CONFIG).eval()
    return full.save_component(model, folder, dtype=torch.float32, max_shard_bytes=200_000,
                               info={"step": 2, "model_family": "qwen_image",
                                     "trainable_models": "dit",
                                     "base_model_path": str(tiny_model_dir / "transformer")})
