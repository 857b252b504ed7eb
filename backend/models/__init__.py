"""Model files: downloads (hub), LoRA read/write, exports, quantization and layer offload.
Imports core, families and config.
"""
