"""Typed errors of the Ringmaster client.

Every failure the server reports becomes a RingmasterError (or one of its
subclasses, chosen by the error code and HTTP status), whose message is the
server's `error.message`, verbatim.
"""


class RingmasterError(Exception):
    """A call failed. `status` is the HTTP status (0 when no answer came),
    `code` the server's error code (e.g. "NotFound"), `message` its text."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def __repr__(self):
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r})"


class InvalidArgument(RingmasterError):
    """400: the request (a spec, a path, a parameter) was refused; the message names the field."""


class Unauthenticated(RingmasterError):
    """401: no token, or a wrong, revoked or disabled user's token."""


class PermissionDenied(RingmasterError):
    """403: the token's scope or the user's role does not allow the call."""


class NotFound(RingmasterError):
    """404: no such job, file or node (another user's job looks the same)."""


class Conflict(RingmasterError):
    """409: the call does not fit the object's state (e.g. deleting a running job)."""


class TooManyRequests(RingmasterError):
    """429: a limit was reached (pending jobs, waits, followers, logins, a quota)."""


class Unavailable(RingmasterError):
    """503, or the server could not be reached (status 0)."""


class Timeout(RingmasterError, TimeoutError):
    """A deadline passed: `wait` before the job ended, or a call with no answer in time."""


_BY_CODE = {
    "invalidargument": InvalidArgument,
    "unauthenticated": Unauthenticated,
    "permissiondenied": PermissionDenied,
    "notfound": NotFound,
    "alreadyexists": Conflict,
    "failedprecondition": Conflict,
    "aborted": Conflict,
    "resourceexhausted": TooManyRequests,
    "unavailable": Unavailable,
    "deadlineexceeded": Timeout,
}

_BY_STATUS = {
    400: InvalidArgument,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    429: TooManyRequests,
    503: Unavailable,
    504: Timeout,
}


def error_for(status, code, message):
    """The typed error for an answer: by the server's code first (whatever its
    case or underscores), else by the HTTP status (a 413 past a quota stays a
    plain RingmasterError)."""
    key = (code or "").replace("_", "").lower()
    cls = _BY_CODE.get(key)
    if cls is None or (status == 413 and cls is TooManyRequests):
        cls = _BY_STATUS.get(status, RingmasterError)
    return cls(status, code, message)
