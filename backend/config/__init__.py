"""The run schema (every option, its bounds and help), validation, the stage CLI, presets and
the low-VRAM options. Imports core and the family registry.
"""
