"""The file types a dataset may hold. Standard library only: the web server's upload gate
imports it before any third-party package is known to be installed."""
from __future__ import annotations

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff")
VIDEO_EXTS = (".mp4", ".webm", ".gif", ".mov", ".mkv", ".avi")
