from os import PathLike
from typing import Any, Iterable, List, Literal, Optional, Union

from . import sessions as sessions
from . import types as types
from ._wmreplay import SYSTEM_RULE as SYSTEM_RULE
from ._wmreplay import LiveReplay as LiveReplay
from ._wmreplay import MessageIter as MessageIter
from ._wmreplay import Replay as Replay
from ._wmreplay import SearchIndex as SearchIndex
from ._wmreplay import SkippedLinesWarning as SkippedLinesWarning
from ._wmreplay import append as append
from ._wmreplay import build_current_user_request_message as build_current_user_request_message
from ._wmreplay import replay as replay
from ._wmreplay import request_body as request_body
from ._wmreplay import records as records
from ._wmreplay import search as search
from .types import Appended, Hit, LogRecord

__all__ = [
    "replay",
    "request_body",
    "append",
    "search",
    "records",
    "areplay",
    "arequest_body",
    "aappend",
    "asearch",
    "arecords",
    "build_current_user_request_message",
    "Replay",
    "LiveReplay",
    "SearchIndex",
    "MessageIter",
    "SYSTEM_RULE",
    "SkippedLinesWarning",
    "types",
    "sessions",
]

async def areplay(
    path: Union[str, "PathLike[str]"],
    record: Literal["raw", "js"] = "raw",
    threads: int = 0,
    *,
    require_log: bool = False,
    warn: bool = True,
) -> Replay:
    """``replay()`` in a thread (``asyncio.to_thread``), the GIL released."""

async def arequest_body(
    path: Union[str, "PathLike[str]"], text: str, session_id: Optional[str] = None, **options: Any
) -> bytes:
    """``request_body()`` in a thread, with the same options."""

async def aappend(path: Union[str, "PathLike[str]"], records: Union[Any, Iterable[Any]]) -> Appended:
    """``append()`` in a thread."""

async def asearch(
    path: Union[str, "PathLike[str]"],
    query: str,
    *,
    limit: int = 10,
    kinds: Optional[List[str]] = None,
    session: Optional[str] = None,
    since: Optional[float] = None,
    until: Optional[float] = None,
    index_path: Optional[Union[str, "PathLike[str]"]] = None,
) -> List[Hit]:
    """``search()`` in a thread (``asyncio.to_thread``), the GIL released."""

async def arecords(
    path: Union[str, "PathLike[str]"],
    *,
    kinds: Optional[List[str]] = None,
    session: Optional[str] = None,
    since: Optional[float] = None,
    until: Optional[float] = None,
    order: Literal["replay", "log"] = "replay",
    require_log: bool = False,
    warn: bool = True,
) -> List[LogRecord]:
    """``records()`` in a thread (``asyncio.to_thread``), the GIL released."""
