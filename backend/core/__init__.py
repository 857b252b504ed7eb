"""The lowest layer: run folders, the read and write gates, disk space, progress events,
media types, library loading and bounded parsing. Standard library only at import time;
imports nothing else of the project.
"""
