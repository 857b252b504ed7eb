"""Messages of the estimate area: each code in English and Chinese (see backend.core.messages)."""

EN: dict[str, str] = {
}

ZH: dict[str, str] = {
}
