"""The exceptions agentwire raises: one class per kind of failure, each carrying the
protocol's error code (``code``, a number, and ``code_name``, e.g. ``"unauthorized"``) when
the hub or a peer gave one."""

from __future__ import annotations

import builtins
from typing import Optional

__all__ = [
    "AgentwireError",
    "ConfigError",
    "ConnectError",
    "RejectedError",
    "RemoteError",
    "TimeoutError",
    "ClosedError",
    "TooLargeError",
]


class AgentwireError(Exception):
    """Any agentwire failure. ``code``/``code_name`` hold the protocol's error code, if any."""

    def __init__(
        self, message: str, code: Optional[int] = None, code_name: Optional[str] = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.code_name = code_name

    def __reduce__(self):  # keeps the code through pickling (multiprocessing, logging)
        return (type(self), (self.message, self.code, self.code_name))


class ConfigError(AgentwireError, ValueError):
    """A bad argument or option (an address, a timeout, a certificate file...)."""


class ConnectError(AgentwireError, ConnectionError):
    """The hub could not be reached, or the TLS handshake failed."""


class RejectedError(AgentwireError, ConnectionError):
    """The hub refused the agent (``code_name``: ``unauthorized``, ``duplicate-agent-id``...)."""


class RemoteError(AgentwireError):
    """The hub or the peer answered with an error (``code_name``: ``unknown-agent``...)."""


class TimeoutError(AgentwireError, builtins.TimeoutError):
    """No answer in time."""


class ClosedError(AgentwireError, ConnectionError):
    """The connection is gone, or the agent was closed."""


class TooLargeError(AgentwireError, ValueError):
    """The message is larger than the hub accepts."""
