from os import PathLike
from typing import Any, Dict, Iterator, List, Literal, Optional, Union

SYSTEM_RULE: str

Format = Literal["anthropic", "openai", "ndjson", "xml"]
Record = Literal["raw", "js"]

class Replay:
    """A replayed log: its stats, messages and request bodies."""

    @property
    def stats(self) -> Dict[str, Any]: ...
    def messages(self) -> List[Dict[str, str]]:
        """The replayed messages, ``{"role", "content"}`` each, in ``ts_ms`` order."""
    def iter_messages(self) -> "MessageIter":
        """The messages decoded one at a time (for very large logs)."""
    def request_body(
        self,
        text: str,
        session_id: Optional[str] = None,
        format: Format = "anthropic",
        system: Optional[str] = None,
    ) -> bytes:
        """The request body: system rule, every message, CURRENT_USER_REQUEST."""
    def __len__(self) -> int: ...

class MessageIter(Iterator[Dict[str, str]]):
    def __iter__(self) -> "MessageIter": ...
    def __next__(self) -> Dict[str, str]: ...

def replay(
    path: Union[str, "PathLike[str]"], record: Record = "raw", threads: int = 0
) -> Replay:
    """Replays the log at ``path`` (a missing file is an empty log), GIL released.

    Raises ``OSError`` (``PermissionError``, ``IsADirectoryError``, …) naming
    the path when the log cannot be read.
    """

class LiveReplay:
    """A replay kept across calls: each parses only the appended bytes."""

    def __init__(
        self,
        path: Union[str, "PathLike[str]"],
        format: Format = "anthropic",
        record: Record = "raw",
    ) -> None: ...
    def refresh(self) -> Dict[str, Any]: ...
    @property
    def stats(self) -> Dict[str, Any]: ...
    def request_body(
        self, text: str, session_id: Optional[str] = None, system: Optional[str] = None
    ) -> bytes: ...
