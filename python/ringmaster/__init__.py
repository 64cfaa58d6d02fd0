"""Ringmaster's Python client (stdlib only): submit jobs, wait for them,
read their logs, metrics and usage, and move files, over the REST API.

    import ringmaster
    c = ringmaster.Client()          # server and token as the CLI finds them
    job = c.submit("examples/hello.yaml")
    print(c.wait(job)["state"])

See docs/python.md.
"""

from .client import ENDED_STATES, Client, JobList, LogLine
from .errors import (Conflict, InvalidArgument, NotFound, PermissionDenied, RingmasterError, Timeout,
                     TooManyRequests, Unauthenticated, Unavailable)
from .files import TextProgress

__all__ = ["Client", "JobList", "LogLine", "ENDED_STATES", "TextProgress", "RingmasterError", "InvalidArgument",
           "Unauthenticated", "PermissionDenied", "NotFound", "Conflict", "TooManyRequests", "Unavailable", "Timeout"]
