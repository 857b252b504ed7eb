"""Layer-wise offload for stage 2 on one GPU, without DeepSpeed (``enable_model_cpu_offload``).

The frozen weights of the trained component's repeated blocks (``Family.offload_blocks``)
live in host memory: one pinned buffer per block (an arena: every tensor of the block at an
aligned offset in one allocation, so the allocator's per-tensor rounding wastes nothing).
Just before a block runs its weights are copied to the GPU; the next block's copy is issued
on a side stream so it overlaps the running block; a block that is not running holds no GPU
storage. Everything else (embedders, norms, the LoRA weights and their optimizer) stays on
the GPU. The LoRA weights are trainable and are never offloaded.

Backward needs the frozen weights again (for the input gradients). Two cases:

- with gradient checkpointing, the block is recomputed in backward: the forward pre-hook
  fires again and reloads the block, in reverse order (the previous block is prefetched);
- without it, autograd would keep every block's weights alive through its saved tensors,
  so each block runs under ``torch.autograd.graph.saved_tensors_hooks`` that store a small
  token instead of a frozen weight (or a view of one) and reload the block when backward
  unpacks it.

Why not diffusers' ``apply_group_offloading`` (block_level, ``use_stream=True``): it moves
weights with ``param.data = param.data.to(...)`` hooks around the forward only. Nothing
reloads a group when backward needs its weights without a recompute (the saved tensors keep
the GPU copies alive, so the memory is never given back), the prefetch order it records is
the forward's (backward runs the other way), and its host copies are pinned tensor by
tensor. What is written here is what it lacks: the saved-tensor tokens, the reverse prefetch
for recompute and backward, and the per-block arena.

On a machine without CUDA the same hooks run with host memory on both sides: a block's
parameters hold no storage while it does not run and get a fresh copy from the arena when
it does (what the tests check); pinning, the side stream and the prefetch are taken only
when CUDA is present.
"""
from __future__ import annotations

from typing import Any, Callable

ALIGN = 64  # bytes: every tensor in an arena starts on a 64-byte boundary


def _pinned_arena(nbytes: int):
    """``nbytes`` of pinned host memory without rounding: ordinary memory registered with
    ``cudaHostRegister`` (PyTorch's pinned allocator rounds every allocation up to a power
    of two, up to twice the bytes); its pinned allocation when registering fails."""
    import torch

    arena = torch.empty(nbytes, dtype=torch.uint8)
    try:
        err = torch.cuda.cudart().cudaHostRegister(arena.data_ptr(), nbytes, 0)
        if int(err) == 0:
            return arena
    except (AttributeError, RuntimeError):
        pass
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


class _Block:
    """One block's frozen parameters: their host arena views and the load state."""

    def __init__(self, index: int, module, params: list, views: list, arena):
        self.index, self.module, self.params, self.views, self.arena = (
            index, module, params, views, arena)
        self.loaded = False
        self.event = None  # CUDA event: the copy issued on the side stream has finished


class LayerOffload:
    """Attach to ``model`` (blocks found by attribute name) and compute on ``device``."""

    def __init__(self, model, block_attrs: tuple[str, ...], device, *, checkpointing: bool,
                 log: Callable[[str], None] = print):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and self.device.index is None:  # tensors report cuda:N
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.checkpointing = checkpointing
        self.blocks: list[_Block] = []
        self.order: list[int] = []       # execution order, recorded in the first forward
        self._seen: set[int] = set()     # blocks run in the current forward (recompute test)
        self._ptr: dict[int, tuple[int, int]] = {}  # storage pointer -> (block, param)
        self._ctx: dict[int, Any] = {}
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.bytes_moved = 0
        self.loads = 0
        modules = []
        for attr in block_attrs:
            blocks = getattr(model, attr, None)
            if blocks is None:
                raise ValueError(f"enable_model_cpu_offload: the model has no block list "
                                 f"{attr!r}")
            modules += list(blocks)
        # Everything outside the blocks, and every trainable tensor, lives on the device.
        for name, child in model.named_children():
            if name not in block_attrs:
                child.to(self.device)
        for p in model.parameters(recurse=False):
            p.data = p.data.to(self.device)
        for m in modules:
            for p in m.parameters():
                if p.requires_grad:
                    p.data = p.data.to(self.device)
        for m in model.modules():
            for key, buf in list(m._buffers.items()):
                if buf is not None:
                    m._buffers[key] = buf.to(self.device)
        arena_bytes = 0
        for i, block in enumerate(modules):
            b = self._build(i, block)
            arena_bytes += b.arena.numel()
            self.blocks.append(b)
            block.register_forward_pre_hook(self._pre_forward(i))
            block.register_forward_hook(self._post_forward(i))
        model.register_forward_pre_hook(self._model_pre_forward)
        self.arena_bytes = arena_bytes
        log(f"[train] layer offload: {len(modules)} blocks, {arena_bytes / 1e9:.3f} GB of "
            f"frozen weights in {'pinned ' if self.cuda else ''}host memory, copied to "
            f"{self.device} block by block"
            + ("" if self.cuda else " (no CUDA: no pinning, side stream or prefetch)"))

    # --- the arena -------------------------------------------------------------------------
    def _build(self, index: int, block) -> _Block:
        import torch

        block.to(self.device)  # one block at a time (bitsandbytes quantizes here)
        frozen = [p for p in block.parameters() if not p.requires_grad
                  and type(p.data) is torch.Tensor and p.data.numel() > 0]
        offsets, total = [], 0
        for p in frozen:
            offsets.append(total)
            total += -(-p.data.nbytes // ALIGN) * ALIGN
        arena = _pinned_arena(max(total, 1)) if self.cuda else torch.empty(
            max(total, 1), dtype=torch.uint8)
        views = []
        for p, off in zip(frozen, offsets):
            v = arena[off:off + p.data.nbytes].view(p.dtype).view(p.shape)
            v.copy_(p.data)
            views.append(v)
            p.data = torch.empty(0, dtype=p.dtype, device=self.device)
        return _Block(index, block, frozen, views, arena)

    # --- moving ----------------------------------------------------------------------------
    def _issue(self, i: int) -> None:
        """Start loading block ``i`` (on the side stream when CUDA is present)."""
        import torch

        b = self.blocks[i]
        if b.loaded:
            return
        if self.cuda:
            compute = torch.cuda.current_stream(self.device)
            with torch.cuda.stream(self.stream):
                self.stream.wait_stream(compute)
                for p, v in zip(b.params, b.views):
                    t = torch.empty(v.shape, dtype=v.dtype, device=self.device)
                    t.copy_(v, non_blocking=True)
                    t.record_stream(compute)
                    p.data = t
                b.event = torch.cuda.Event()
                b.event.record(self.stream)
        else:
            for p, v in zip(b.params, b.views):
                p.data = v.clone()
        for j, p in enumerate(b.params):
            self._ptr[p.data.untyped_storage().data_ptr()] = (i, j)
        b.loaded = True
        self.loads += 1
        self.bytes_moved += sum(v.nbytes for v in b.views)

    def _wait(self, i: int) -> None:
        b = self.blocks[i]
        if b.event is not None:
            import torch
            torch.cuda.current_stream(self.device).wait_event(b.event)
            b.event = None

    def _drop(self, i: int) -> None:
        import torch

        b = self.blocks[i]
        if not b.loaded:
            return
        for p in b.params:
            self._ptr.pop(p.data.untyped_storage().data_ptr(), None)
            p.data = torch.empty(0, dtype=p.dtype, device=self.device)
        b.loaded = False

    def use(self, i: int, backward: bool = False) -> None:
        """Block ``i`` is about to run: load it, drop the others, prefetch the next one
        (the previous one in backward) when CUDA is present."""
        nxt = self._neighbour(i, -1 if backward else 1) if self.cuda else None
        for j, b in enumerate(self.blocks):
            if b.loaded and j not in (i, nxt):
                self._drop(j)
        self._issue(i)
        self._wait(i)
        if nxt is not None:
            self._issue(nxt)

    def _neighbour(self, i: int, step: int) -> int | None:
        order = self.order if len(self.order) == len(self.blocks) else list(
            range(len(self.blocks)))
        k = order.index(i) + step if i in order else -1
        return order[k] if 0 <= k < len(order) else None

    def release_all(self) -> None:
        for i in range(len(self.blocks)):
            self._drop(i)

    def loaded_blocks(self) -> list[int]:
        return [b.index for b in self.blocks if b.loaded]

    # --- hooks -----------------------------------------------------------------------------
    def _model_pre_forward(self, module, args):
        self._seen = set()

    def _pre_forward(self, i: int):
        def hook(module, args):
            import torch

            recompute = i in self._seen
            if not recompute:
                self._seen.add(i)
                if len(self.order) < len(self.blocks) and i not in self.order:
                    self.order.append(i)
            self.use(i, backward=recompute)
            if not self.checkpointing and torch.is_grad_enabled() and not recompute:
                ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
                ctx.__enter__()
                self._ctx[i] = ctx
        return hook

    def _post_forward(self, i: int):
        def hook(module, args, output):
            ctx = self._ctx.pop(i, None)
            if ctx is not None:
                ctx.__exit__(None, None, None)
            self._drop(i)  # saved tensors hold tokens (or their own reference): safe
        return hook

    def _pack(self, t):
        import torch

        if isinstance(t, torch.Tensor) and type(t) is torch.Tensor and t.device == self.device:
            key = self._ptr.get(t.untyped_storage().data_ptr()) if t.numel() else None
            if key is not None:
                return ("frozen", key, tuple(t.shape), tuple(t.stride()), t.storage_offset())
        return t

    def _unpack(self, packed):
        if isinstance(packed, tuple) and len(packed) == 5 and packed[0] == "frozen":
            _, (i, j), shape, stride, offset = packed
            if not self.blocks[i].loaded:
                self.use(i, backward=True)
            return self.blocks[i].params[j].data.as_strided(shape, stride, offset)
        return packed


def attach(cfg, family, model, device, log: Callable[[str], None] = print) -> LayerOffload:
    """Layer offload of the run's trained component (``enable_model_cpu_offload``)."""
    if not family.offload_blocks:
        raise ValueError(f"enable_model_cpu_offload: the {family.spec.name} family names no "
                         f"blocks to offload (got true; allowed false)")
    return LayerOffload(model, tuple(family.offload_blocks), device,
                        checkpointing=bool(cfg.use_gradient_checkpointing), log=log)


def make_optimizer(cfg, params: list, log: Callable[[str], None] = print):
    """``enable_optimizer_cpu_offload``: torchao's ``CPUOffloadOptimizer`` (AdamW states and
    step in host memory, the LoRA copied back after each step) when the LoRA is on a GPU;
    on a CPU-only machine everything is in host memory already and plain AdamW runs."""
    import torch

    kw = {"lr": cfg.learning_rate, "weight_decay": cfg.weight_decay,
          "betas": (cfg.adam_beta1, cfg.adam_beta2), "eps": cfg.adam_epsilon}
    # ``params``: tensors, or parameter groups (LoRA+), which both optimizers take.
    first = params[0]["params"][0] if params and isinstance(params[0], dict) else \
        (params[0] if params else None)
    if first is not None and first.device.type == "cuda":
        try:
            from torchao.optim import CPUOffloadOptimizer
        except ImportError:
            raise RuntimeError("enable_optimizer_cpu_offload: needs the torchao package "
                               "(pip install torchao)") from None
        log("[train] optimizer AdamW offloaded to host memory (torchao CPUOffloadOptimizer)")
        return CPUOffloadOptimizer(params, torch.optim.AdamW, **kw)
    log("[train] enable_optimizer_cpu_offload: the LoRA is in host memory already; AdamW runs "
        "there")
    return torch.optim.AdamW(params, **kw)
