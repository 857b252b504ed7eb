"""The sign-in limiter: failed sign-ins counted per user name and per client address."""
from __future__ import annotations

import math
import threading
import time

class LoginLimiter:
    """Failed sign-ins, counted per user name and per client address, in memory.

    After ``max_failures`` failures for one name within ``window_s`` seconds, that name is
    refused for ``window_s`` seconds -- the right password too; one address gets
    ``max_address_failures`` (more: people behind one proxy or NAT share an address).
    ``clock`` (seconds, monotonic) is injectable so tests need not wait. Only names and
    addresses are kept here, never passwords.
    """

    def __init__(self, max_failures: int = 5, window_s: float = 300.0,
                 max_address_failures: int = 20, clock=time.monotonic,
                 max_keys: int = 10_000):
        self.max_failures = max_failures
        self.max_address_failures = max_address_failures
        self.window_s = float(window_s)
        self.clock = clock
        self.max_keys = max_keys
        self._failures: dict[tuple[str, str], list[float]] = {}
        self._locked: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(user: str | None, address: str | None) -> list[tuple[str, str]]:
        return ([("user", user)] if user else []) + ([("address", address)] if address else [])

    def _limit(self, key: tuple[str, str]) -> int:
        return self.max_failures if key[0] == "user" else self.max_address_failures

    def _prune(self, now: float) -> None:
        for key in [k for k, until in self._locked.items() if until <= now]:
            del self._locked[key]
        for key in list(self._failures):
            recent = [t for t in self._failures[key] if now - t < self.window_s]
            if recent:
                self._failures[key] = recent
            else:
                del self._failures[key]
        for table in (self._failures, self._locked):  # a flood of made-up names
            while len(table) > self.max_keys:
                table.pop(next(iter(table)))

    def wait_s(self, user: str | None = None, address: str | None = None) -> float:
        """Seconds before ``user`` (from ``address``) may try again; 0: now."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            return max([self._locked.get(k, now) - now for k in self._keys(user, address)]
                       + [0.0])

    def failed(self, user: str | None = None, address: str | None = None) -> None:
        """Count one failed sign-in; the name (address) is locked at its limit."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            for key in self._keys(user, address):
                times = self._failures.setdefault(key, [])
                times.append(now)
                if len(times) >= self._limit(key):
                    self._locked[key] = now + self.window_s
                    del self._failures[key]

    def succeeded(self, user: str | None = None) -> None:
        """A correct sign-in clears the name's earlier failures (not a lock)."""
        with self._lock:
            self._failures.pop(("user", user or ""), None)

    def refusal(self, user: str | None = None, address: str | None = None) -> str | None:
        """The message for a refused attempt (None: it may go ahead)."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            waits = [(self._locked[k] - now, k) for k in self._keys(user, address)
                     if k in self._locked]
        if not waits:
            return None
        wait, key = max(waits)
        minutes, seconds = divmod(math.ceil(wait), 60)
        when = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
        who = f"user name {key[1]!r}" if key[0] == "user" else "your address"
        return (f"sign-in: too many failed attempts for {who} ({self._limit(key)} within "
                f"{self.window_s / 60:g} minutes); wait {when} and try again")


