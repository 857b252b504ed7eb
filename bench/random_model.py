"""A Qwen-Image pipeline folder of any size with random bf16 weights, written offline.

``write_pipeline(root, configs, components)`` writes, in the hub layout the stages load::

    root/model_index.json
    root/transformer/   diffusers QwenImageTransformer2DModel (config.json, sharded safetensors)
    root/text_encoder/  transformers Qwen2_5_VLForConditionalGeneration (config.json, shards)
    root/vae/           diffusers AutoencoderKLQwenImage
    root/tokenizer/     the tiny model's byte-level BPE (backend/models/tiny.py; 504 ids)
    root/scheduler/     the real Qwen-Image scheduler config

Each model is built on the meta device (no memory), then every parameter is materialised
on its own in bf16 (on the GPU when ``gen_device`` is cuda), copied to the host and written
in ~2 GB safetensors shards, so host RAM holds a shard or two, never the model. Never
float32, nothing downloaded. A finished folder carries ``zerolora_random.json`` (the config
it was made from, written last); ``reuse=True`` keeps such a folder when the config matches.
Random weights compute garbage at the real cost: enough to measure memory and time.

``configs`` maps transformer / text_encoder / vae to config mappings: the published
Qwen-Image ones (``backend.families.qwen_image.published.CONFIGS``: 20.4 B, 8.29 B and 0.127 B
parameters = 40.9 + 16.6 + 0.25 GB) or tiny ones for CPU checks (bench/tiny_*_config.json).
"""
from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

COMPONENTS = ("transformer", "text_encoder", "vae")
SHARD_BYTES = 2 * 10**9
MARKER = "zerolora_random.json"
DIFFUSERS_CLASS = {"transformer": "QwenImageTransformer2DModel",
                   "vae": "AutoencoderKLQwenImage"}
WEIGHTS_PREFIX = {"transformer": "diffusion_pytorch_model", "vae": "diffusion_pytorch_model",
                  "text_encoder": "model"}
MODEL_INDEX = {
    "_class_name": "QwenImagePipeline",
    "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
    "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
    "tokenizer": ["transformers", "Qwen2Tokenizer"],
    "transformer": ["diffusers", "QwenImageTransformer2DModel"],
    "vae": ["diffusers", "AutoencoderKLQwenImage"],
}


def meta_model(component: str, config: dict[str, Any]):
    """(the component built on the meta device, a function saving its config.json)."""
    from accelerate import init_empty_weights

    if component == "text_encoder":  # the estimator's recipe: flat or nested configs
        import transformers

        kwargs = {k: v for k, v in config.items() if not k.startswith("_")}
        arch = (kwargs.pop("architectures", None) or ["Qwen2_5_VLForConditionalGeneration"])[0]
        conf = transformers.AutoConfig.for_model(kwargs.pop("model_type", "qwen2_5_vl"),
                                                 **kwargs)
        conf.architectures = [arch]
        with init_empty_weights():
            model = getattr(transformers, arch)(conf)
        return model, lambda folder: conf.save_pretrained(str(folder))
    import diffusers

    cls = getattr(diffusers, config.get("_class_name", DIFFUSERS_CLASS[component]))
    with init_empty_weights():
        model = cls.from_config(config)
    return model, lambda folder: model.save_config(str(folder))


def text_vocab_size(config: dict[str, Any]) -> int:
    return int(config.get("vocab_size") or config.get("text_config", {}).get("vocab_size"))


def reusable(folder: Path, config: dict[str, Any]) -> dict | None:
    """What a previous run wrote to ``folder`` for the same config, if complete."""
    try:
        info = json.loads((folder / MARKER).read_text())
        index = json.loads((folder / info["index"]).read_text())
    except (OSError, ValueError, KeyError):
        return None
    if info.get("config") != json.loads(json.dumps(config)) or not all(
            (folder / s).is_file() for s in set(index["weight_map"].values())):
        return None
    return {**{k: v for k, v in info.items() if k not in ("config", "index")},
            "seconds": 0.0, "reused": True}


def write_component(component: str, config: dict[str, Any], folder: Path, *,
                    gen_device: str = "cpu", seed: int = 0, reuse: bool = False,
                    shard_bytes: int = SHARD_BYTES) -> dict:
    """Random bf16 weights for ``config`` in ``folder`` (config.json, shards + index), one
    parameter in memory at a time plus the shards being written (two writer threads)."""
    import torch
    from safetensors.torch import save_file

    old = reusable(folder, config) if reuse else None
    if old is not None:
        return old
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    model, save_config = meta_model(component, config)
    save_config(folder)
    prefix = WEIGHTS_PREFIX[component]
    g = torch.Generator(device=gen_device).manual_seed(seed)
    shard: dict = {}
    size = total = count = 0
    weight_map: dict[str, str] = {}
    names: list[str] = []
    pool, pending = ThreadPoolExecutor(max_workers=2), []

    def flush() -> None:
        nonlocal shard, size
        if not shard:
            return
        name = f"{prefix}-{len(names) + 1:05d}.safetensors"
        pending.append(pool.submit(save_file, shard, str(folder / name), {"format": "pt"}))
        names.append(name)
        weight_map.update({k: name for k in shard})
        shard, size = {}, 0
        while len(pending) > 2:
            pending.pop(0).result()

    t0 = time.time()
    for pname, p in model.state_dict().items():  # parameters and persistent buffers
        t = torch.empty(p.shape, dtype=torch.bfloat16, device=gen_device)
        if p.ndim >= 2:
            t.normal_(0.0, 0.02, generator=g)
        elif pname.endswith("weight"):
            t.fill_(1.0)   # norm scales
        else:
            t.zero_()      # biases
        shard[pname] = t.cpu()
        size += t.numel() * 2
        total += t.numel() * 2
        count += t.numel()
        del t
        if size >= shard_bytes:
            flush()
    flush()
    for f in pending:
        f.result()
    pool.shutdown()
    index = f"{prefix}.safetensors.index.json"
    (folder / index).write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    info = {"params": count, "bytes": total, "shards": len(names),
            "seconds": round(time.time() - t0, 1)}
    (folder / MARKER).write_text(json.dumps({**info, "config": config, "index": index}))
    return info


def write_tokenizer(folder: Path, vocab_size: int) -> Path:
    """The tiny model's tokenizer: its 504 ids fit the real text encoder's 152064-entry
    embedding as well as the tiny one's 1024."""
    from backend.families.qwen_image.tiny import build_tokenizer

    tok = build_tokenizer()
    if len(tok) > vocab_size:
        raise ValueError(f"text encoder vocab_size {vocab_size} < tokenizer size {len(tok)}")
    tok.save_pretrained(str(folder))
    return folder


def write_scheduler(folder: Path) -> Path:
    from diffusers import FlowMatchEulerDiscreteScheduler

    from backend.families.qwen_image.adapter import SCHEDULER_CONFIG

    FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG).save_pretrained(str(folder))
    return folder


def write_pipeline(root: Path, configs: dict[str, dict], components: list[str], *,
                   places: dict[str, Path] | None = None, gen_device: str = "cpu",
                   reuse: bool = False, log=print) -> dict[str, dict]:
    """Write ``components`` (any of transformer, text_encoder, vae; tokenizer and scheduler
    follow the text encoder and transformer) under ``root``; returns what each took.
    ``places`` may put a component's folder elsewhere (another disk, /dev/shm): it is
    written there and linked into ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "model_index.json").write_text(json.dumps(MODEL_INDEX, indent=1))
    out: dict[str, dict] = {}
    for comp in components:
        link, folder = root / comp, Path((places or {}).get(comp, root / comp))
        if link.is_symlink():
            link.unlink()
        elif folder != link and link.exists():
            shutil.rmtree(link)
        folder.parent.mkdir(parents=True, exist_ok=True)
        info = write_component(comp, configs[comp], folder, gen_device=gen_device,
                               seed=COMPONENTS.index(comp), reuse=reuse)
        if folder != link:
            link.symlink_to(folder.resolve(), target_is_directory=True)
        verb = "reused" if info.get("reused") else "wrote"
        log(f"{comp}: {verb} {info['params'] / 1e9:.3f} B parameters ({info['bytes'] / 1e9:.2f}"
            f" GB bf16, {info['shards']} shards) in {info['seconds']} s -> {folder}")
        out[comp] = {**info, "folder": str(folder)}
        if comp == "text_encoder":
            write_tokenizer(root / "tokenizer", text_vocab_size(configs[comp]))
        if comp == "transformer":
            write_scheduler(root / "scheduler")
    return out


def pipeline_bytes(configs: dict[str, dict], components: list[str]) -> int:
    """bf16 bytes the components take on disk (counted on the meta device)."""
    return sum(2 * sum(t.numel() for t in meta_model(c, configs[c])[0].state_dict().values())
               for c in components)


def write_random_lora(path: Path, transformer_config: dict[str, Any], rank: int,
                      targets: list[str], gen_device: str = "cpu", seed: int = 0) -> Path:
    """A LoRA file in the product's format (``backend.models.lora.save_lora``) with random bf16
    tensors of ``rank`` on ``targets`` of the transformer: what the sample stage loads."""
    import torch

    from backend.models.lora import expected_shapes, save_lora

    model, _ = meta_model("transformer", transformer_config)
    g = torch.Generator(device=gen_device).manual_seed(seed)
    tensors = {k: torch.empty(s, dtype=torch.bfloat16, device=gen_device)
               .normal_(0.0, 0.01, generator=g).cpu()
               for k, s in expected_shapes(model, rank, targets).items()}
    return save_lora(path, tensors, rank=rank, target_modules=targets)


def caption_of_tokens(tokenizer, n: int) -> tuple[str, int]:
    """A caption the tokenizer splits into about ``n`` tokens (at least one word), and the
    exact count."""
    words = ("a red circle and a blue square on a white background with a green triangle "
             "in the center").split()
    text, i = words[0], 1
    while len(tokenizer(text + " " + words[i % len(words)])["input_ids"]) <= n:
        text += " " + words[i % len(words)]
        i += 1
    return text, len(tokenizer(text)["input_ids"])
