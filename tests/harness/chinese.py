"""Checks that a message reads in Chinese: no English left in what the Chinese page shows."""
from __future__ import annotations

from backend.core.messages import Msg
from webui.messages import english_left


def assert_chinese(m) -> str:
    """``m`` is a message whose Chinese has no English left; returns its Chinese."""
    assert isinstance(m, Msg), f"not a message: {m!r}"
    zh = m.text("zh")
    assert english_left(zh) == [], (m.code, zh, english_left(zh))
    return zh
