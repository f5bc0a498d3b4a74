"""The error a process raises when a part of it cannot start: an address taken or not this host's, a
setting refused, Redis refusing the login. The master's and the worker's ``main`` print its message as
one line and exit 2; the parts both processes share (their HTTP endpoint) raise it too, so each ``main``
catches this one class without importing the parts a configuration leaves out.
"""

from __future__ import annotations


class StartupError(RuntimeError):
    """This process cannot start as configured; the message says why and what to do."""
