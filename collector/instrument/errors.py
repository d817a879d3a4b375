"""Errors the instrumentation helpers raise into the agent's code."""

from __future__ import annotations

from collector.errors import CollectorError


class MaxIterationsExceeded(CollectorError):
    """An :func:`~collector.instrument.agent_run` with ``raise_on_max=True`` reached its cap.

    Raised by :meth:`AgentRun.tick` after the run's root span was marked
    ``vigil.max_iterations_hit=true``; when it leaves the ``with`` block the root span also
    gets status ERROR and ``error.type = "collector.instrument.MaxIterationsExceeded"``.

    Attributes:
        agent: the agent name given to ``agent_run``.
        iterations: iterations counted when the cap was reached.
        max_iterations: the configured cap.
    """

    # The public import path, so error.type on spans does not leak the private module name.
    __module__ = "collector.instrument"

    def __init__(self, agent: str, iterations: int, max_iterations: int) -> None:
        self.agent = agent
        self.iterations = iterations
        self.max_iterations = max_iterations
        super().__init__(f"agent {agent!r} reached max_iterations={max_iterations} ({iterations} iterations)")
