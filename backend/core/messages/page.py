"""Messages of the page area: each code in English and Chinese (see backend.core.messages)."""

EN: dict[str, str] = {
}

ZH: dict[str, str] = {
}
