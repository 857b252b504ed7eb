"""The run schema and its views, one concept per module: ``schema.py`` (every option, its
default, bounds and help; family defaults), ``labels.py``, ``meta.py`` (``field_meta``),
``rules.py`` (rules between options), ``validation.py`` (``validate``), ``errors.py``
(``ConfigError``), ``files.py`` (YAML), ``cli.py`` (the stage command line), ``paths.py``,
``presets.py`` and ``lowvram.py`` (the low-VRAM options). Imports core and the family registry.
"""
