"""What the agent's parts hold of the agent: the instrumentation (instrument.py), the census
schedule (census_schedule.py) and the snapshot store (snapshots.py) are given the agent
(client.Agent) and use only this of it. A Protocol, so a test may give them any object with
these methods, and none of them needs to import the client."""

from __future__ import annotations

from typing import Any, Optional, Protocol, Tuple

from ..protocol import TableSchema


class AgentPort(Protocol):
    def event(self, type_: str, t: Optional[int] = None, **data: Any) -> None:
        """Queue an event for the recorder (outbox.Outbox.event)."""

    def row(self, schema: TableSchema, values: Tuple[int, ...]) -> None:
        """Queue one row of an agent table."""

    def name_id(self, name: str) -> int:
        """A small number standing for `name` in table rows."""

    def error(self, where: str, exc: BaseException) -> None:
        """Report an agent failure once per place; the script is never disturbed."""

    def report_exception(self, exc: BaseException, where: str, uncaught: bool = False) -> None:
        """Report an exception of the script's (an OOM, an error that ends the run)."""

    def cuda_reader(self) -> Any:
        """The reader of the CUDA allocator's statistics (cuda.py), once CUDA is up."""
