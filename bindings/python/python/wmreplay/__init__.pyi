from os import PathLike
from typing import Any, Iterable, Literal, Optional, Union

from . import types as types
from ._wmreplay import SYSTEM_RULE as SYSTEM_RULE
from ._wmreplay import LiveReplay as LiveReplay
from ._wmreplay import MessageIter as MessageIter
from ._wmreplay import Replay as Replay
from ._wmreplay import SkippedLinesWarning as SkippedLinesWarning
from ._wmreplay import append as append
from ._wmreplay import build_current_user_request_message as build_current_user_request_message
from ._wmreplay import replay as replay
from ._wmreplay import request_body as request_body
from .types import Appended

__all__ = [
    "replay",
    "request_body",
    "append",
    "areplay",
    "arequest_body",
    "aappend",
    "build_current_user_request_message",
    "Replay",
    "LiveReplay",
    "MessageIter",
    "SYSTEM_RULE",
    "SkippedLinesWarning",
    "types",
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
