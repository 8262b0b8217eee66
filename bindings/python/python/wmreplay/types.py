"""The shapes of wmreplay's results, as TypedDicts for type checkers (at run
time they are plain dicts and lists)."""

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union

__all__ = [
    "Role", "TextBlock", "AnthropicMessage", "OpenAIMessage", "Skip", "Stats", "Refreshed",
    "AppendedRecord", "Appended", "Hit", "IndexRefreshed", "LogRecord",
]

Role = Literal["user", "assistant"]


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class AnthropicMessage(TypedDict):
    """One message in the Anthropic Messages shape, as the original function
    built it: ``{"role": ..., "content": [{"type": "text", "text": ...}]}``."""

    role: Role
    content: List[TextBlock]


class OpenAIMessage(TypedDict):
    """One message in the Chat Completions shape: the text as a string."""

    role: Role
    content: str


class Skip(TypedDict):
    """A skipped line: ``line`` is 1-based (blank lines count), ``offset`` the
    byte offset of its start."""

    line: int
    offset: int
    category: Literal["invalid_json", "invalid_shape"]
    reason: str


class Stats(TypedDict):
    """What a replay saw; ``skips`` lists the first 16 skipped lines."""

    total_lines: int
    parsed_entries: int
    skipped_invalid_json: int
    skipped_invalid_shape: int
    bytes: int
    unterminated_tail: bool
    already_ordered: bool
    skips: List[Skip]
    log_missing: bool
    """Whether the log does not exist (then the replay is empty)."""


class Refreshed(TypedDict):
    """What one ``LiveReplay.refresh()`` did."""

    rebuilt: bool
    bytes_read: int
    bytes_committed: int
    records_added: int
    late_records: int
    log_missing: bool


class AppendedRecord(TypedDict):
    """Where one appended record went: its ``ts_ms`` (as given, or the one
    stamped), the byte offset of its line and the line's length with its
    ``\\n``."""

    ts_ms: Union[int, float]
    offset: int
    bytes: int


class Appended(TypedDict):
    """What ``append()`` wrote: the answer of ``wmreplay serve``'s
    ``POST /v1/records``."""

    written: int
    records: List[AppendedRecord]


class Hit(TypedDict):
    """One record found by ``search()``: what ``wmreplay search`` prints for
    it. ``offset`` is the byte offset of its line in the log, ``ts_ms`` its
    ``ts_ms`` (``None`` when not a finite number), ``type`` its ``type``,
    ``score`` its score (higher is better; BM25 with its neighbours' shares, or
    the fused score of a hybrid search) and ``record`` the line's
    JSON, decoded."""

    offset: int
    ts_ms: Optional[Union[int, float]]
    type: str
    score: float
    record: Dict[str, Any]


class IndexRefreshed(TypedDict):
    """What one ``SearchIndex.refresh()`` read into the index: ``rebuilt``
    (made again from the whole log: first use, or the log was replaced,
    truncated or rewritten), and the log ``bytes`` and ``records`` added."""

    rebuilt: bool
    bytes: int
    records: int


class LogRecord(TypedDict):
    """One record of a log, as ``records()`` gives it (a ``Hit`` without a
    score): ``offset`` the byte offset of its line, ``ts_ms`` its ``ts_ms``
    (``None`` when not a finite number), ``type`` its ``type``, ``record``
    the line's JSON, decoded."""

    offset: int
    ts_ms: Optional[Union[int, float]]
    type: str
    record: Dict[str, Any]
