"""Slowing down repeated failed logins: pure bookkeeping, time passed in.

After ``free_failures`` consecutive failures for a key (a username, or a client address),
each further attempt must wait ``base_delay_s * 2**k`` seconds after the last failure
(capped at ``max_delay_s``), where ``k`` counts the failures beyond the free ones. A
success for the key forgets it. Keys are bounded in number so a flood of invented
usernames cannot grow memory without end.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["LoginGuard", "LoginThrottle"]


@dataclass
class _Failures:
    count: int
    last_at: float


_MOST_DOUBLINGS = 64


class LoginThrottle:
    def __init__(
        self,
        *,
        free_failures: int = 5,
        base_delay_s: float = 1.0,
        max_delay_s: float = 300.0,
        max_keys: int = 10_000,
    ) -> None:
        self._free = free_failures
        self._base = base_delay_s
        self._max = max_delay_s
        self._max_keys = max_keys
        self._failures: OrderedDict[str, _Failures] = OrderedDict()

    def retry_after(self, key: str, now: float) -> float:
        """Seconds ``key`` must still wait before its next attempt (0 when it may try)."""
        failures = self._failures.get(key)
        if failures is None or failures.count < self._free:
            return 0.0
        # The exponent is capped: past ~1,000 failures 2.0 ** n overflows a float (a 500
        # for the client that keeps failing), and 2 ** 64 times the base is past any max.
        doublings = min(failures.count - self._free, _MOST_DOUBLINGS)
        delay = min(self._base * 2.0**doublings, self._max)
        return max(0.0, failures.last_at + delay - now)

    def failed(self, key: str, now: float) -> None:
        failures = self._failures.pop(key, None) or _Failures(0, now)
        failures.count += 1
        failures.last_at = now
        self._failures[key] = failures
        while len(self._failures) > self._max_keys:
            self._failures.popitem(last=False)

    def succeeded(self, key: str) -> None:
        self._failures.pop(key, None)


class LoginGuard:
    """Throttles logins by username and by client address together.

    One address may host many people, so it is allowed ``address_factor`` times the
    username's free failures before it is slowed down.
    """

    def __init__(
        self,
        *,
        free_failures: int = 5,
        base_delay_s: float = 1.0,
        max_delay_s: float = 300.0,
        address_factor: int = 4,
    ) -> None:
        self._by_user = LoginThrottle(
            free_failures=free_failures, base_delay_s=base_delay_s, max_delay_s=max_delay_s
        )
        self._by_address = LoginThrottle(
            free_failures=free_failures * address_factor,
            base_delay_s=base_delay_s,
            max_delay_s=max_delay_s,
        )

    def retry_after(self, username: str, address: str, now: float) -> float:
        return max(
            self._by_user.retry_after(username.lower(), now),
            self._by_address.retry_after(address, now),
        )

    def failed(self, username: str, address: str, now: float) -> None:
        self._by_user.failed(username.lower(), now)
        self._by_address.failed(address, now)

    def succeeded(self, username: str, address: str) -> None:
        self._by_user.succeeded(username.lower())
        self._by_address.succeeded(address)
