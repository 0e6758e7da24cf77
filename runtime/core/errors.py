"""Errors that cross the control socket. Clients branch on ``code``, never on the message."""

from __future__ import annotations

# Stable error codes of the control protocol.
BAD_REQUEST = "bad_request"  # not JSON, not an object, line too long, wrong field types
UNKNOWN_COMMAND = "unknown_command"
INVALID_VALUE = "invalid_value"  # a setting or mode that was refused; nothing was applied
UNAVAILABLE = "unavailable"  # the model server could not be reached or refused the change
INTERNAL = "internal"
FORBIDDEN = "forbidden"  # the peer's uid is neither the socket owner's nor root


class CommandError(Exception):
    """A refused command; becomes ``{"ok": false, "error": {"code", "message", ...}}``."""

    def __init__(self, code: str, message: str, **details: object) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def as_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, **self.details}
