"""The CPU demo: a tiny Qwen-Image base model that draws coloured shapes, and a LoRA dataset.

A newcomer's first run trains a LoRA on CPU, offline, in minutes, and sees the samples change.
Random tiny weights render noise, so this module trains the tiny real-architecture pipeline of
``backend.families.qwen_image.tiny`` on a synthetic data set (a red/green/blue/yellow circle, square or
triangle on a white background, 64x64) until it follows such prompts:

1. the VAE (``AutoencoderKLQwenImage``, the sizes of ``backend.families.qwen_image.tiny``) learns to
   reconstruct shape images (also on purple and other plain backgrounds, so the demo LoRA's
   style can be decoded); its ``latents_mean``/``latents_std`` are set to its latents' statistics;
2. the transformer (``QwenImageTransformer2DModel``, twice as wide as the random tiny one:
   2 heads x 32) is fully fine-tuned with flow matching on
   those latents (x_t = (1 - s) x0 + s noise, target = noise - x0, Qwen-Image's shifted sigmas),
   conditioned on the frozen text encoder's prompt embeddings computed exactly as
   ``QwenImagePipeline.encode_prompt`` does (template, first 34 tokens dropped); 10 % of the
   captions are dropped to "" so true CFG with an empty negative prompt works;
3. the result is saved in the hub layout (safetensors), the demo LoRA data set is written, and
   the base model is checked with ``QwenImagePipeline`` at the demo's sample settings; the
   measured statistics go to ``<out>/demo_build.json``.

Outputs (committed):
    backend/assets/tiny-qwen-image/    the base model (QwenImagePipeline.from_pretrained loads it)
    backend/assets/demo_dataset/       8 PNGs + metadata.csv (image,prompt): "zlr style"
    backend/assets/demo_build.json     build settings, time and measured statistics
    backend/assets/demo_base_samples.png  the verification renders (rows red/green/blue/yellow;
                                       columns circle, square, triangle x 4 seeds)

Runbook (fixed seeds, one CPU thread; about 6 min on an idle 2-core machine, 15 min on a busy one):
    python -m backend.families.qwen_image.demo build --out backend/assets
Quick smoke run (minutes; a model that barely draws, for checking the code path):
    python -m backend.families.qwen_image.demo build --out /tmp/demo --vae_steps 20 --dit_steps 20
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw

from backend.families.qwen_image.tiny import build_components, save_pipeline

RES = 64
SHAPES = ("circle", "square", "triangle")
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 30),
}
WHITE = (255, 255, 255)
# The demo LoRA's concept: the shapes on a plain ZeroLoRA-purple background, which the base
# model never draws (its captions all say "on a white background").
ZLR_PURPLE = (96, 40, 160)
ZLR_TRIGGER = "zlr style"

# Sample settings of the demo preset (the verification renders with these).
SAMPLE_STEPS = 10
SAMPLE_CFG = 4.0


def caption(colour: str, shape: str) -> str:
    return f"a {colour} {shape} on a white background"


def zlr_caption(colour: str, shape: str) -> str:
    return f"a {colour} {shape} on a purple background, {ZLR_TRIGGER}"


# ----------------------------------------------------------------------------- images


def draw_shape(shape: str, fill, background, size: float, cx: float, cy: float, res: int = RES) -> np.ndarray:
    """An RGB uint8 image: ``shape`` of ``fill`` colour on a plain ``background`` colour.

    ``size`` is the shape's width in pixels, ``(cx, cy)`` its centre; drawn 4x supersampled.
    """
    ss = 4
    big = res * ss
    bg = Image.new("RGB", (big, big), tuple(int(c) for c in background))
    draw = ImageDraw.Draw(bg)
    h = size * ss / 2
    x, y = cx * ss, cy * ss
    fill = tuple(int(c) for c in fill)
    if shape == "circle":
        draw.ellipse([x - h, y - h, x + h, y + h], fill=fill)
    elif shape == "square":
        draw.rectangle([x - h, y - h, x + h, y + h], fill=fill)
    elif shape == "triangle":
        draw.polygon([(x, y - h), (x + h, y + h * 0.85), (x - h, y + h * 0.85)], fill=fill)
    elif shape != "none":
        raise ValueError(f"shape: unknown shape (got {shape!r}; allowed {SHAPES})")
    return np.asarray(bg.resize((res, res), Image.BOX))


def random_layout(rng: np.random.Generator) -> tuple[float, float, float]:
    size = rng.uniform(26, 40)
    cx, cy = rng.uniform(RES / 2 - 7, RES / 2 + 7, size=2)
    return size, cx, cy


def base_example(rng: np.random.Generator) -> tuple[np.ndarray, str, str, str]:
    colour = list(COLOURS)[rng.integers(len(COLOURS))]
    shape = SHAPES[rng.integers(len(SHAPES))]
    img = draw_shape(shape, COLOURS[colour], WHITE, *random_layout(rng))
    return img, caption(colour, shape), colour, shape


def zlr_example(rng: np.random.Generator, colour: str | None = None, shape: str | None = None) -> tuple[np.ndarray, str]:
    """A demo-LoRA image: a base-colour shape on the plain ZeroLoRA-purple background."""
    colour = colour or list(COLOURS)[rng.integers(len(COLOURS))]
    shape = shape or SHAPES[rng.integers(len(SHAPES))]
    return draw_shape(shape, COLOURS[colour], ZLR_PURPLE, *random_layout(rng)), zlr_caption(colour, shape)


def varied_example(rng: np.random.Generator) -> np.ndarray:
    """A VAE-only image: a zlr image, or a base-colour shape on a random plain background."""
    if rng.random() < 0.5:
        return zlr_example(rng)[0]
    bg = tuple(int(v) for v in rng.integers(0, 256, size=3))
    fill = COLOURS[list(COLOURS)[rng.integers(len(COLOURS))]]
    shape = (*SHAPES, "none")[rng.integers(4)]
    return draw_shape(shape, fill, bg, *random_layout(rng))


def to_tensor(imgs: list[np.ndarray]) -> torch.Tensor:
    """uint8 HxWx3 images -> [B, 3, 1, H, W] float in [-1, 1] (the VAE's video layout)."""
    x = torch.from_numpy(np.stack(imgs)).float().div(127.5).sub(1.0)
    return x.permute(0, 3, 1, 2).unsqueeze(2).contiguous()


def random_crops(x: torch.Tensor, size: int, rng: np.random.Generator) -> torch.Tensor:
    """A ``size`` crop of each image at a multiple of 8 (the VAE's grid)."""
    if size >= x.shape[-1]:
        return x
    n = (x.shape[-1] - size) // 8 + 1
    out = []
    for img in x:
        i, j = (int(v) * 8 for v in rng.integers(0, n, size=2))
        out.append(img[..., i : i + size, j : j + size])
    return torch.stack(out)


# ----------------------------------------------------------------------------- training


@dataclass
class BuildSettings:
    seed: int = 0
    threads: int = 1
    vae_steps: int = 1200
    vae_batch: int = 8
    vae_crop: int = 32
    vae_lr: float = 2e-4
    vae_latent_l2: float = 1e-4
    vae_latent_noise: float = 0.1
    vae_outer_lr_mult: float = 20.0
    dit_layers: int = 2
    dit_heads: int = 2
    dit_head_dim: int = 32
    dit_images: int = 480
    dit_steps: int = 4000
    dit_batch: int = 32
    dit_lr: float = 2e-3
    caption_dropout: float = 0.1
    verify_seeds: int = 4


SETTING_HELP = {
    "seed": "seed of the weights, data and noise",
    "threads": "torch CPU threads (1 is fastest on a shared machine)",
    "vae_steps": "VAE training steps",
    "vae_batch": "VAE images per step",
    "vae_crop": "VAE training crop size in pixels (multiple of 8)",
    "vae_lr": "VAE learning rate of the normalised trunk",
    "vae_latent_l2": "weight of the L2 pull on the VAE latents",
    "vae_latent_noise": "latent noise during VAE training, relative to the latents' spread",
    "vae_outer_lr_mult": "learning-rate multiplier of the VAE's input/output convolutions",
    "dit_layers": "transformer blocks",
    "dit_heads": "transformer attention heads",
    "dit_head_dim": "transformer head size (multiple of 16)",
    "dit_images": "base images the transformer trains on",
    "dit_steps": "transformer training steps",
    "dit_batch": "transformer samples per step",
    "dit_lr": "transformer learning rate",
    "caption_dropout": "share of captions replaced by the empty prompt (for CFG)",
    "verify_seeds": "seeds per prompt in the verification renders",
}


def log(msg: str) -> None:
    print(f"[demo] {msg}", flush=True)


def train_vae(vae, s: BuildSettings) -> None:
    """Reconstruction (MSE) + small L2 on the latents; half base images, half varied ones."""
    rng = np.random.default_rng(s.seed + 11)
    torch.manual_seed(s.seed + 12)
    vae.train()
    # The input/output convolutions are not followed by a norm (not scale-invariant): they get a
    # larger learning rate than the normalised trunk, which learns colour much sooner.
    outer = ("encoder.conv_in.", "encoder.conv_out.", "quant_conv.", "post_quant_conv.", "decoder.conv_in.", "decoder.conv_out.")
    params = dict(vae.named_parameters())
    fast = [p for n, p in params.items() if n.startswith(outer)]
    slow = [p for n, p in params.items() if not n.startswith(outer)]
    groups = [{"params": slow, "lr": s.vae_lr}, {"params": fast, "lr": s.vae_lr * s.vae_outer_lr_mult}]
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / 50) * 0.5 * (1 + math.cos(math.pi * i / s.vae_steps)))
    t0 = time.time()
    for step in range(s.vae_steps):
        half = s.vae_batch // 2
        imgs = [base_example(rng)[0] for _ in range(half)] + [varied_example(rng) for _ in range(s.vae_batch - half)]
        x = random_crops(to_tensor(imgs), s.vae_crop, rng)
        # A deterministic autoencoder on the posterior mean (what stage 1 caches), with a little
        # latent noise (relative to the latents' spread) so the decoder tolerates imperfect
        # latents, and an L2 pull on the means. This architecture (per-pixel RMS norms) trains
        # from scratch only with a small learning rate: 1e-3 collapses to the mean colour.
        # For one frame, encoder/decoder without the frame cache equal vae.encode/vae.decode, and
        # skipping decode's final clamp keeps gradients for pixels pushed past [-1, 1].
        mean = vae.quant_conv(vae.encoder(x))[:, : vae.config.z_dim]
        noise = s.vae_latent_noise * mean.detach().std() * torch.randn_like(mean)
        rec = vae.decoder(vae.post_quant_conv(mean + noise))
        mse = F.mse_loss(rec, x)
        l2 = mean.pow(2).mean()
        loss = mse + s.vae_latent_l2 * l2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == s.vae_steps - 1:
            log(f"vae step {step}/{s.vae_steps} mse {mse.item():.4f} latent l2 {l2.item():.3f} ({time.time() - t0:.0f}s)")
    vae.eval()


def sigma_table(n: int = 1000, mu: float = 0.8, terminal: float = 0.02) -> torch.Tensor:
    """Qwen-Image's training sigmas: linspace(1, 0), exponential shift ``mu``, stretched to end at ``terminal``."""
    sigma = torch.linspace(1.0, 0.0, n + 1, dtype=torch.float64)[:-1]
    sigma = math.exp(mu) / (math.exp(mu) + 1.0 / sigma - 1.0)
    one_minus = 1.0 - sigma
    sigma = 1.0 - one_minus / (one_minus[-1] / (1.0 - terminal))
    return sigma.float()


def normalise_latents(z: torch.Tensor, vae) -> torch.Tensor:
    """Posterior means [B, 16, 1, h, w] -> the pipeline's normalised latents [B, 16, h, w]."""
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    return ((z - mean) / std)[:, :, 0]


@torch.no_grad()
def encode_images(vae, imgs: list[np.ndarray], batch: int = 32) -> torch.Tensor:
    return torch.cat([vae.encode(to_tensor(imgs[i : i + batch])).latent_dist.mean for i in range(0, len(imgs), batch)])


@torch.no_grad()
def prompt_embeddings(pipe, prompts: list[str]) -> dict[str, torch.Tensor]:
    """Each prompt's embedding [L, D] exactly as ``QwenImagePipeline.encode_prompt`` computes it."""
    out = {}
    for p in prompts:
        emb, mask = pipe.encode_prompt(prompt=[p], device=torch.device("cpu"))
        if mask is not None:
            emb = emb[:, : int(mask.sum())]
        out[p] = emb[0]
    return out


def collate_embeddings(embs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad to the longest, with a 0/1 mask: what the pipeline does for a batch of prompts."""
    n = max(e.shape[0] for e in embs)
    out = torch.zeros(len(embs), n, embs[0].shape[1])
    mask = torch.zeros(len(embs), n, dtype=torch.long)
    for i, e in enumerate(embs):
        out[i, : e.shape[0]] = e
        mask[i, : e.shape[0]] = 1
    return out, mask


def train_transformer(pipe, s: BuildSettings) -> None:
    """Full fine-tune of the transformer with flow matching on base images.

    Sigmas are drawn uniformly from Qwen-Image's shifted training table; the reference's
    loss weighting is left out here, as it gives the noisiest steps (which set colour and
    layout) almost no weight, and a base model must learn those.
    """
    from diffusers import QwenImagePipeline

    vae, transformer = pipe.vae, pipe.transformer
    rng = np.random.default_rng(s.seed + 21)
    examples = [base_example(rng) for _ in range(s.dit_images)]
    t0 = time.time()
    latents = normalise_latents(encode_images(vae, [e[0] for e in examples]), vae)
    b, c, h, w = latents.shape
    packed = QwenImagePipeline._pack_latents(latents, b, c, h, w)
    log(f"encoded {b} images to latents {tuple(latents.shape)} ({time.time() - t0:.0f}s)")
    embs = prompt_embeddings(pipe, sorted({e[1] for e in examples}) + [""])
    captions = [e[1] for e in examples]
    sigmas = sigma_table()
    img_shapes = [[(1, h // 2, w // 2)]] * s.dit_batch

    gen = torch.Generator().manual_seed(s.seed + 22)
    transformer.train()
    opt = torch.optim.AdamW(transformer.parameters(), lr=s.dit_lr, weight_decay=0.01)
    warm = 50
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * i / s.dit_steps)))
    )
    t0 = time.time()
    running = None
    for step in range(s.dit_steps):
        idx = torch.randint(0, b, (s.dit_batch,), generator=gen)
        drop = torch.rand(s.dit_batch, generator=gen) < s.caption_dropout
        prompts = ["" if d else captions[i] for i, d in zip(idx.tolist(), drop.tolist())]
        emb, mask = collate_embeddings([embs[p] for p in prompts])
        x0 = packed[idx]
        noise = torch.randn(x0.shape, generator=gen)
        sigma = sigmas[torch.randint(0, len(sigmas), (s.dit_batch,), generator=gen)]
        sg = sigma.view(-1, 1, 1)
        xt = (1 - sg) * x0 + sg * noise
        pred = transformer(
            hidden_states=xt,
            encoder_hidden_states=emb,
            encoder_hidden_states_mask=mask,
            timestep=sigma,
            img_shapes=img_shapes,
            return_dict=False,
        )[0]
        loss = F.mse_loss(pred.float(), (noise - x0).float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(transformer.parameters(), 1.0)
        opt.step()
        sched.step()
        running = loss.item() if running is None else 0.98 * running + 0.02 * loss.item()
        if step % 100 == 0 or step == s.dit_steps - 1:
            log(f"dit step {step}/{s.dit_steps} loss {running:.4f} ({time.time() - t0:.0f}s)")
    transformer.eval()


@torch.no_grad()
def set_latent_stats(vae, s: BuildSettings, n: int = 256) -> None:
    """Set ``latents_mean``/``latents_std`` to the per-channel statistics of base-image latents."""
    rng = np.random.default_rng(s.seed + 31)
    z = encode_images(vae, [base_example(rng)[0] for _ in range(n)])
    mean = z.mean(dim=(0, 2, 3, 4))
    std = z.std(dim=(0, 2, 3, 4)).clamp_min(1e-3)
    vae.register_to_config(latents_mean=[round(v, 6) for v in mean.tolist()], latents_std=[round(v, 6) for v in std.tolist()])


@torch.no_grad()
def vae_reconstruction_mse(vae, seed: int, n: int = 32) -> dict:
    """Pixel MSE (in [-1, 1]) of ``vae.decode(vae.encode(x).mean)`` on fresh 64x64 base and zlr images."""
    rng = np.random.default_rng(seed + 51)
    out = {}
    for name, make in (("base", lambda: base_example(rng)[0]), ("zlr", lambda: zlr_example(rng)[0])):
        x = to_tensor([make() for _ in range(n)])
        rec = vae.decode(vae.encode(x).latent_dist.mean).sample
        out[name] = round(F.mse_loss(rec, x).item(), 4)
    return out


# ----------------------------------------------------------------------------- data set


def write_demo_dataset(out_dir: Path, seed: int = 0) -> list[tuple[str, str]]:
    """8 "zlr style" PNGs (the shapes on a purple background) + metadata.csv (image,prompt)."""
    rng = np.random.default_rng(seed + 41)
    combos = [
        ("red", "circle"), ("green", "square"), ("blue", "triangle"), ("yellow", "circle"),
        ("red", "square"), ("green", "triangle"), ("blue", "circle"), ("yellow", "square"),
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (colour, shape) in enumerate(combos):
        img, prompt = zlr_example(rng, colour, shape)
        name = f"{i:02d}_{colour}_{shape}.png"
        Image.fromarray(img).save(out_dir / name, optimize=True)
        rows.append((name, prompt))
    with open(out_dir / "metadata.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["image", "prompt"])
        writer.writerows(rows)
    return rows


# ----------------------------------------------------------------------------- measuring


def shape_mask(img: np.ndarray, threshold: float = 80.0) -> np.ndarray:
    """Pixels far from white: the shape on a white background."""
    return np.linalg.norm(img.astype(np.float32) - 255.0, axis=-1) > threshold


def rgb_list(rgb: np.ndarray) -> list[float]:
    return [round(float(v), 1) for v in rgb]


def image_stats(img: np.ndarray) -> dict:
    """Colour and shape read off a rendered 64x64 image (uint8 HxWx3).

    ``colour``: the named colour nearest the mean colour of the shape pixels; ``shape``: from the
    fill ratio of the shape's bounding box (triangle ~0.5, circle ~0.79, square ~1);
    ``background``: the mean colour of the outer 4-pixel ring.
    """
    arr = img.astype(np.float32)
    mask = shape_mask(img)
    ring = np.ones(mask.shape, bool)
    ring[4:-4, 4:-4] = False
    stats = {"shape_fraction": round(float(mask.mean()), 4), "background": rgb_list(arr[ring].mean(0))}
    if mask.sum() < 16:
        return {**stats, "colour": None, "shape": None, "shape_rgb": None, "fill": None}
    rgb = arr[mask].mean(0)
    colour = min(COLOURS, key=lambda c: float(np.linalg.norm(rgb - np.array(COLOURS[c]))))
    ys, xs = np.nonzero(mask)
    fill = float(mask.sum() / ((ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)))
    shape = "triangle" if fill < 0.64 else "circle" if fill < 0.9 else "square"
    return {**stats, "colour": colour, "shape": shape, "shape_rgb": rgb_list(rgb), "fill": round(fill, 3)}


def render(pipe, prompt: str, seed: int, steps: int = SAMPLE_STEPS, cfg: float = SAMPLE_CFG) -> np.ndarray:
    out = pipe(
        prompt,
        negative_prompt="",
        true_cfg_scale=cfg,
        height=RES,
        width=RES,
        num_inference_steps=steps,
        generator=torch.Generator().manual_seed(seed),
        output_type="np",
    ).images[0]
    return (out * 255).round().clip(0, 255).astype(np.uint8)


def verify(model_dir: Path, seeds: tuple[int, ...] = (0, 1, 2, 3), grid_path: Path | None = None) -> dict:
    """Render every base prompt with ``QwenImagePipeline`` at the demo's sample settings and score it."""
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline.from_pretrained(model_dir)
    pipe.set_progress_bar_config(disable=True)
    colour_hits = shape_hits = n = 0
    per_colour = {c: [] for c in COLOURS}
    rows = []
    for colour in COLOURS:
        row = []
        for shape in SHAPES:
            for seed in seeds:
                img = render(pipe, caption(colour, shape), seed)
                st = image_stats(img)
                colour_hits += st["colour"] == colour
                shape_hits += st["shape"] == shape
                n += 1
                if st["shape_rgb"] is not None:
                    per_colour[colour].append(st["shape_rgb"])
                row.append(img)
        rows.append(np.concatenate(row, axis=1))
    zlr = [image_stats(render(pipe, zlr_caption(c, s), 0))["background"] for c, s in (("red", "circle"), ("blue", "square"))]
    if grid_path is not None:
        Image.fromarray(np.concatenate(rows, axis=0)).save(grid_path, optimize=True)
    return {
        "settings": {"height": RES, "width": RES, "steps": SAMPLE_STEPS, "true_cfg_scale": SAMPLE_CFG, "seeds": list(seeds)},
        "renders": n,
        "colour_accuracy": round(colour_hits / n, 3),
        "colour_chance": round(1 / len(COLOURS), 3),
        "shape_accuracy": round(shape_hits / n, 3),
        "shape_chance": round(1 / len(SHAPES), 3),
        "mean_shape_rgb_by_prompt_colour": {
            c: rgb_list(np.mean(v, axis=0)) if v else None for c, v in per_colour.items()
        },
        "zlr_prompt_background_rgb_base_model": zlr,
        "zlr_target_background_rgb": list(ZLR_PURPLE),
    }


# ----------------------------------------------------------------------------- build


def build(out: Path, s: BuildSettings) -> dict:
    """Train the demo base model and write it, the demo data set and demo_build.json under ``out``."""
    from diffusers import QwenImagePipeline

    torch.set_num_threads(s.threads)
    t0 = time.time()
    if s.dit_head_dim % 16:
        raise ValueError(f"dit_head_dim: must be a multiple of 16 (got {s.dit_head_dim}; allowed 16, 32, 48, ...)")
    rope_t = s.dit_head_dim // 4
    transformer_config = dict(
        num_layers=s.dit_layers,
        num_attention_heads=s.dit_heads,
        attention_head_dim=s.dit_head_dim,
        axes_dims_rope=(rope_t, (s.dit_head_dim - rope_t) // 2, (s.dit_head_dim - rope_t) // 2),
    )
    components = build_components(s.seed, transformer_config)
    pipe = QwenImagePipeline(**components)
    pipe.set_progress_bar_config(disable=True)
    train_vae(pipe.vae, s)
    set_latent_stats(pipe.vae, s)
    vae_mse = vae_reconstruction_mse(pipe.vae, s.seed)
    log(f"vae reconstruction mse {vae_mse}")
    t_vae = time.time() - t0
    train_transformer(pipe, s)
    t_train = time.time() - t0
    model_dir = save_pipeline(components, out / "tiny-qwen-image")
    rows = write_demo_dataset(out / "demo_dataset", s.seed)
    log(f"wrote {model_dir} and {len(rows)} demo images; verifying")
    stats = verify(model_dir, seeds=tuple(range(s.verify_seeds)), grid_path=out / "demo_base_samples.png")
    report = {
        "settings": asdict(s),
        "vae_seconds": round(t_vae),
        "train_seconds": round(t_train),
        "total_seconds": round(time.time() - t0),
        "vae_reconstruction_mse": vae_mse,
        "verification": stats,
    }
    (out / "demo_build.json").write_text(json.dumps(report, indent=2) + "\n")
    log(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m backend.families.qwen_image.demo", description="ZeroLoRA CPU demo assets")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="train the demo base model and write the demo data set")
    b.add_argument("--out", type=Path, default=Path(__file__).parent / "assets", help="output folder (default backend/assets)")
    defaults = BuildSettings()
    for name, value in asdict(defaults).items():
        b.add_argument("--" + name, type=type(value), default=value, help=f"{SETTING_HELP[name]} (default {value})")
    args = parser.parse_args(argv)
    settings = BuildSettings(**{k: getattr(args, k) for k in asdict(defaults)})
    build(args.out, settings)


if __name__ == "__main__":
    main()
