"""Errors that cross the control socket. Clients branch on ``code``, never on the message."""

from __future__ import annotations

# Stable error codes of the control protocol.
BAD_REQUEST = "bad_request"  # not JSON, not an object, line too long, wrong field types
UNKNOWN_COMMAND = "unknown_command"
INVALID_VALUE = "invalid_value"  # a setting or mode that was refused; nothing was applied
UNAVAILABLE = "unavailable"  # the model server could not be reached or refused the change
INTERNAL = "internal"
FORBIDDEN = "forbidden"  # the peer's uid is neither the socket owner's nor root

# An error's ``kind`` (a detail beside ``code``) where the value itself is wrong, whatever the server
# runs (``off_at=-1``, ``steps=99``): the CLI exits 2 for it, as for its own usage errors, and 1 for
# a refusal that depends on the server's state.
MALFORMED = "malformed"


class CommandError(Exception):
    """A refused command; becomes ``{"ok": false, "error": {"code", "message", ...}}``."""

    def __init__(self, code: str, message: str, **details: object) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def as_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, **self.details}
