"""The shapes of wmreplay's results, as TypedDicts for type checkers (at run
time they are plain dicts and lists)."""

from typing import List, Literal, TypedDict, Union

__all__ = [
    "Role", "TextBlock", "AnthropicMessage", "OpenAIMessage", "Skip", "Stats", "Refreshed",
    "AppendedRecord", "Appended",
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
