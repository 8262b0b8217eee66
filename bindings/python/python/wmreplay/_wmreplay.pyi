from os import PathLike
from typing import Iterator, List, Literal, Optional, TypeVar, Union, final, overload

from .types import AnthropicMessage, OpenAIMessage, Refreshed, Stats

SYSTEM_RULE: str

__all__ = ["replay", "Replay", "LiveReplay", "MessageIter", "SYSTEM_RULE"]

_Format = Literal["anthropic", "openai", "ndjson", "xml"]
_Record = Literal["raw", "js"]

@final
class Replay:
    """A replayed log: its stats, messages and request bodies.

    It keeps the log mapped: ``messages()``, ``iter_messages()`` and
    ``request_body()`` read it again, then check it. A log truncated or
    rewritten since ``replay()`` raises a plain ``OSError`` (no errno,
    ``filename`` the path, "the file changed … replay it again") from them,
    never bytes of a file that is gone; replay it again. A result that does
    not fit in memory raises ``MemoryError``. Safe to share between threads.
    """

    @property
    def stats(self) -> Stats: ...
    @overload
    def messages(self, format: Literal["anthropic"] = "anthropic") -> List[AnthropicMessage]:
        """The replayed messages in ``ts_ms`` order (without the current request).

        ``"anthropic"`` (the default, the original function's shape):
        ``{"role", "content": [{"type": "text", "text"}]}`` each;
        ``"openai"``: ``{"role", "content": text}``, the cheap way to the texts.
        Either is ready to go into a request's ``messages``. Raises
        ``ValueError`` for any other format.
        """
    @overload
    def messages(self, format: Literal["openai"]) -> List[OpenAIMessage]: ...
    @overload
    def iter_messages(self, format: Literal["anthropic"] = "anthropic") -> "MessageIter[AnthropicMessage]":
        """The same messages as ``messages(format)``, decoded one at a time."""
    @overload
    def iter_messages(self, format: Literal["openai"]) -> "MessageIter[OpenAIMessage]": ...
    def request_body(
        self,
        text: str,
        session_id: Optional[str] = None,
        format: _Format = "anthropic",
        system: Optional[str] = None,
    ) -> bytes:
        """The request body (UTF-8 JSON, or XML): system rule, every message,
        ``CURRENT_USER_REQUEST``. Byte for byte ``wmreplay respond``'s body."""
    def __len__(self) -> int:
        """The number of replayed records (``stats["parsed_entries"]``)."""

_M = TypeVar("_M", AnthropicMessage, OpenAIMessage)

@final
class MessageIter(Iterator[_M]):
    """The messages of a replay, decoded one at a time. Shared between
    threads, it hands each message to exactly one of them, without a lock."""

    def __iter__(self) -> "MessageIter[_M]": ...
    def __next__(self) -> _M: ...

def replay(path: Union[str, "PathLike[str]"], record: _Record = "raw", threads: int = 0) -> Replay:
    """Replays the log at ``path`` (a missing file is an empty log), GIL released.

    Raises ``OSError`` whose ``filename`` is the path when the log cannot be
    read: ``IsADirectoryError``, ``PermissionError``, … by errno, a plain
    ``OSError`` for a FIFO, device or socket (errno ``EINVAL``) or a file that
    shrank or was replaced while being read (no errno); ``MemoryError`` if its
    records do not fit in memory; ``ValueError`` for an unknown ``record``.
    """

@final
class LiveReplay:
    """A replay kept across calls: each parses only the appended bytes."""

    def __new__(
        cls,
        path: Union[str, "PathLike[str]"],
        format: _Format = "anthropic",
        record: _Record = "raw",
    ) -> "LiveReplay": ...
    def refresh(self) -> Refreshed:
        """Reads what was appended since the last call."""
    @property
    def stats(self) -> Stats: ...
    def request_body(
        self, text: str, session_id: Optional[str] = None, system: Optional[str] = None
    ) -> bytes:
        """Brings the replay up to date, then the body in the replay's format."""
