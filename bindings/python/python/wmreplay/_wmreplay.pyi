from os import PathLike
from typing import (
    Any,
    Awaitable,
    Iterable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    TypeVar,
    Union,
    final,
    overload,
)

from .types import AnthropicMessage, Appended, Hit, IndexRefreshed, LogRecord, OpenAIMessage, Refreshed, Stats

SYSTEM_RULE: str

__all__ = [
    "replay",
    "request_body",
    "append",
    "search",
    "records",
    "build_current_user_request_message",
    "Replay",
    "LiveReplay",
    "SearchIndex",
    "MessageIter",
    "SYSTEM_RULE",
    "SkippedLinesWarning",
    "MissingLogWarning",
    "FileError",
    "__version__",
]

__version__: str
"""The package's version (``importlib.metadata.version("wmreplay")``)."""

_Format = Literal["anthropic", "openai", "ndjson", "xml"]
_Record = Literal["raw", "js"]
_Tokenizer = Literal["o200k_base", "cl100k_base", "bytes"]
_Path = Union[str, "PathLike[str]"]
_Record_ = Union[Mapping[str, Any], str, bytes, bytearray]

class SkippedLinesWarning(UserWarning):
    """More than half of a log's lines are not records: the file is likely not a
    working-memory log (a wrong path, a pretty-printed JSON file) or a broken
    writer made it. The message names the count and the first skipped line.
    ``warn=False`` on the call, or a warnings filter, silences it."""

class MissingLogWarning(UserWarning):
    """The log does not exist (a mistyped path, most often): it is replayed as an
    empty log, as ``wmreplay respond`` does with a warning. ``require_log=True``
    makes it a ``FileNotFoundError``; ``warn=False`` on the call, or a warnings
    filter, silences it. A ``LiveReplay`` warns once while the log stays missing."""

class FileError(OSError):
    """An error about a file (the log, its state store, its search index) that has
    no errno: a log that changed while it was read, a damaged store. ``filename``
    is the file; ``strerror``, and ``str()``, the message."""

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
        *,
        model: Optional[str] = None,
        max_output_tokens: Optional[int] = None,
        params: Optional[Mapping[str, Any]] = None,
        allow_params: Optional[List[str]] = None,
        session_only: bool = False,
        kinds: Optional[List[str]] = None,
        since: Optional[float] = None,
        until: Optional[float] = None,
        tail: Optional[int] = None,
        max_tokens: Optional[int] = None,
        tokenizer: Optional[_Tokenizer] = None,
        trim_to: Optional[float] = None,
        start_on: Optional[str] = None,
        mark_pending: bool = False,
        summaries: bool = False,
        facts: bool = False,
        cache: Literal["auto", "none"] = "none",
        cache_ttl: Literal["5m", "1h"] = "5m",
        state: Optional[_Path] = None,
    recall: Optional[int] = None,
    language: Optional[str] = None,
    ) -> bytes:
        """The request body, byte for byte what ``wmreplay respond`` writes for
        the same options (the options are ``wmreplay.request_body``'s; the
        record mode is the replay's). A selection (a window, filters, the
        pending mark) replays the log's bytes again: this replay keeps every
        record."""
    def arequest_body(
        self,
        text: str,
        session_id: Optional[str] = None,
        format: _Format = "anthropic",
        system: Optional[str] = None,
        **options: Any,
    ) -> Awaitable[bytes]:
        """``request_body()`` in a thread (``asyncio.to_thread``)."""
    def __len__(self) -> int:
        """The number of replayed records (``stats["parsed_entries"]``)."""

_M = TypeVar("_M", AnthropicMessage, OpenAIMessage)

@final
class MessageIter(Iterator[_M]):
    """The messages of a replay, decoded one at a time. Shared between
    threads, it hands each message to exactly one of them, without a lock."""

    def __iter__(self) -> "MessageIter[_M]": ...
    def __next__(self) -> _M: ...

def replay(
    path: _Path,
    record: _Record = "raw",
    threads: int = 0,
    *,
    require_log: bool = False,
    warn: bool = True,
) -> Replay:
    """Replays the log at ``path``, GIL released.

    A missing file is an empty log (``stats["log_missing"]`` is then true), or
    with ``require_log=True`` a ``FileNotFoundError``. A log most of whose
    lines are not records raises a ``SkippedLinesWarning`` (unless
    ``warn=False``). Raises ``OSError`` whose ``filename`` is the path when
    the log cannot be read: ``IsADirectoryError``, ``PermissionError``, … by
    errno, a plain ``OSError`` for a FIFO, device or socket (errno ``EINVAL``)
    or a file that shrank or was replaced while being read (no errno);
    ``MemoryError`` if its records do not fit in memory; ``ValueError`` for an
    unknown ``record``.
    """

def request_body(
    path: _Path,
    text: str,
    session_id: Optional[str] = None,
    *,
    format: _Format = "anthropic",
    system: Optional[str] = None,
    record: _Record = "raw",
    model: Optional[str] = None,
    max_output_tokens: Optional[int] = None,
    params: Optional[Mapping[str, Any]] = None,
    allow_params: Optional[List[str]] = None,
    session_only: bool = False,
    kinds: Optional[List[str]] = None,
    since: Optional[float] = None,
    until: Optional[float] = None,
    tail: Optional[int] = None,
    max_tokens: Optional[int] = None,
    tokenizer: Optional[_Tokenizer] = None,
    trim_to: Optional[float] = None,
    start_on: Optional[str] = None,
    mark_pending: bool = False,
    summaries: bool = False,
    facts: bool = False,
    cache: Literal["auto", "none"] = "none",
    cache_ttl: Literal["5m", "1h"] = "5m",
    state: Optional[_Path] = None,
    recall: Optional[int] = None,
    language: Optional[str] = None,
    require_log: bool = False,
    warn: bool = True,
) -> bytes:
    """The request body of the log at ``path``: byte for byte what
    ``wmreplay respond PATH --text TEXT …`` writes for the same options.

    - ``model``: the body starts with the provider's leading fields (``model``,
      the answer's limit ``max_output_tokens``, default 1024, then ``params``,
      checked against the provider's API: a name it does not take, a value of
      the wrong type, a reserved name is a ``ValueError`` naming it;
      ``allow_params`` lets newer names through). Without a model the body has
      no leading fields (the contract's body); there is no built-in model.
    - Selection: ``session_only`` (the records of ``session_id``, and those
      without one), ``kinds``, ``since``, ``until``, ``tail``, ``max_tokens``
      (with ``tokenizer``, default ``"o200k_base"``), ``trim_to`` (cache-stable
      windows; the start is remembered in ``state``, default
      ``PATH.wmreplay.db``), ``start_on``, ``mark_pending``; ``summaries`` (the newest
      ``wm_summary`` first, in place of what it covers) and ``facts`` (the
      ``wm_fact`` records as one ``wm_facts`` message).
    - ``cache="auto"``: Anthropic prompt-cache breakpoints (``cache_ttl``
      ``"5m"`` or ``"1h"``); format ``"anthropic"`` only.
    - ``recall=K`` (1 to 1000; ``respond --recall K``): the K records best
      matching ``text`` that the body does not replay, as one
      ``WM_KIND=recall`` message just before the request, found by the search
      index next to the log (``language``: its analysis, default ``"english"``).
    - ``record`` defaults to ``"raw"`` (the line as written: byte-stable, so a
      provider's prompt cache keeps hitting).

    Invalid values raise ``ValueError`` naming the option; wrong types and
    unknown names ``TypeError``. Errors and warnings are ``replay()``'s.
    """

def append(path: _Path, records: Union[_Record_, Iterable[_Record_]]) -> Appended:
    """Appends one record or a list of records to the log at ``path``
    (created if needed) as ``wmreplay serve`` appends them, GIL released.

    Each record is a dict (serialised with ``json``) or the JSON text of one
    (``str`` or ``bytes``): an object with a string ``type``; a ``ts_ms``,
    when present, must be a number. One that is not raises ``ValueError``
    naming its index, and nothing is written. Each is written as one compact
    line; one without ``ts_ms`` is stamped (first in the object) with the
    clock, never below the ``ts_ms`` of the log's last record or an earlier
    record of the batch; one with ``ts_ms`` is written as given. The batch is
    written with one ``write`` under the log's advisory lock (the lock
    ``wmreplay serve`` takes), after a ``\\n`` if the log's last line is torn,
    cut back if the write fails, and synced before ``append()`` returns.
    Returns ``{"written", "records": [{"ts_ms", "offset", "bytes"}]}``.
    """

def build_current_user_request_message(text: str, session_id: Optional[str] = None) -> str:
    """``CURRENT_USER_REQUEST\\nsession_id: <session_id or none>\\nuser_text: <text>``:
    the current request's message text (``none`` for ``None`` only; an empty
    id is written empty)."""

@final
class LiveReplay:
    """A replay kept across calls: each parses only the appended bytes."""

    def __new__(
        cls,
        path: _Path,
        format: _Format = "anthropic",
        record: _Record = "raw",
    ) -> "LiveReplay": ...
    def refresh(self, *, require_log: bool = False, warn: bool = True) -> Refreshed:
        """Reads what was appended since the last call."""
    def arefresh(self, *, require_log: bool = False, warn: bool = True) -> Awaitable[Refreshed]:
        """``refresh()`` in a thread (``asyncio.to_thread``)."""
    @property
    def stats(self) -> Stats: ...
    def request_body(
        self,
        text: str,
        session_id: Optional[str] = None,
        system: Optional[str] = None,
        *,
        model: Optional[str] = None,
        max_output_tokens: Optional[int] = None,
        params: Optional[Mapping[str, Any]] = None,
        allow_params: Optional[List[str]] = None,
        session_only: bool = False,
        kinds: Optional[List[str]] = None,
        since: Optional[float] = None,
        until: Optional[float] = None,
        tail: Optional[int] = None,
        max_tokens: Optional[int] = None,
        tokenizer: Optional[_Tokenizer] = None,
        trim_to: Optional[float] = None,
        start_on: Optional[str] = None,
        mark_pending: bool = False,
        summaries: bool = False,
        facts: bool = False,
        cache: Literal["auto", "none"] = "none",
        cache_ttl: Literal["5m", "1h"] = "5m",
        state: Optional[_Path] = None,
    recall: Optional[int] = None,
    language: Optional[str] = None,
        require_log: bool = False,
        warn: bool = True,
    ) -> bytes:
        """Brings the replay up to date, then the body in the replay's format
        and record mode with the options of ``wmreplay.request_body``: the
        same bytes, for the log's complete lines."""
    def arequest_body(
        self, text: str, session_id: Optional[str] = None, system: Optional[str] = None, **options: Any
    ) -> Awaitable[bytes]:
        """``request_body()`` in a thread (``asyncio.to_thread``)."""

def search(
    path: _Path,
    query: str,
    *,
    limit: int = 10,
    kinds: Optional[List[str]] = None,
    session: Optional[str] = None,
    since: Optional[float] = None,
    until: Optional[float] = None,
    index_path: Optional[_Path] = None,
    language: Optional[str] = None,
    embed_upstream: Optional[str] = None,
    embed_model: Optional[str] = None,
    embed_key_env: Optional[str] = None,
    embed_dimensions: Optional[int] = None,
    embed_timeout: Optional[float] = None,
    embed_weight: Optional[float] = None,
) -> List[Hit]:
    """The records of the log at ``path`` best matching ``query``, best first
    (BM25), GIL released: what ``wmreplay search`` prints, as
    ``[{"offset", "ts_ms", "type", "score", "record"}]``, ``record`` the
    line's JSON decoded.

    The query's words (letters and digits, case and diacritics ignored,
    stemmed in the index's ``language``: ``"english"`` by default, ``"none"``,
    or another Snowball language, as ``wmreplay search --language``; stop
    words counting little when the query has others) are matched against the words
    of each record's string values, identifiers (one token with a digit)
    apart. ``limit``: 1 to 1000;
    ``kinds``: only records of these types; ``session``: only records of this
    ``session_id``, and those without one; ``since``/``until``: ``ts_ms``
    bounds. The index is kept at ``index_path`` (default
    ``PATH.wmreplay.idx``), made on first use and brought up to date with
    the appended lines before each search. A missing log finds nothing
    (``[]``).

    A query without a word, longer than 4096 bytes or 64 distinct words, or a
    ``limit`` out of range raises ``ValueError`` (the engine's message) before
    anything is read; a wrong type ``TypeError``. A log that cannot be read
    raises ``OSError`` whose ``filename`` is the log; an index that cannot be
    made, read or written a plain ``OSError`` whose ``filename`` is the index
    file.
    """

def records(
    path: _Path,
    *,
    kinds: Optional[List[str]] = None,
    session: Optional[str] = None,
    since: Optional[float] = None,
    until: Optional[float] = None,
    order: Literal["replay", "log"] = "replay",
    require_log: bool = False,
    warn: bool = True,
) -> List[LogRecord]:
    """The records of the log at ``path`` (one replay, GIL released), each
    ``{"offset", "ts_ms", "type", "record"}``: the byte offset of its line,
    its ``ts_ms`` (``None`` when not a finite number), its ``type`` and the
    line's JSON, decoded.

    Every record, or those the filters keep (a search's: ``kinds``, only
    records of these types; ``session``, only records of this
    ``session_id`` and those without one; ``since``/``until``, ``ts_ms``
    bounds), in replay order (``order="replay"``, a stable sort by
    ``ts_ms``) or in the order the lines were written (``order="log"``).
    Lines that are not records are skipped, as a replay skips them (a log
    most of whose lines are not raises a ``SkippedLinesWarning`` unless
    ``warn=False``). A missing log has none (``[]``), or with
    ``require_log=True`` raises ``FileNotFoundError``; other errors are
    ``replay()``'s. An unknown ``order`` raises ``ValueError``, a wrong type
    ``TypeError``.
    """

@final
class SearchIndex:
    """A log's search index kept open across searches (for a long-lived
    process): each search brings it up to date with the lines appended since
    the last. Nothing is read or made until the first search or refresh.
    Safe to share between threads (searches on one index take turns)."""

    def __new__(
        cls,
        path: _Path,
        *,
        index_path: Optional[_Path] = None,
        language: Optional[str] = None,
        embed_upstream: Optional[str] = None,
        embed_model: Optional[str] = None,
        embed_key_env: Optional[str] = None,
        embed_dimensions: Optional[int] = None,
        embed_timeout: Optional[float] = None,
        embed_weight: Optional[float] = None,
    ) -> "SearchIndex": ...
    @property
    def path(self) -> PathLike[str]:
        """The log."""
    @property
    def index_path(self) -> PathLike[str]:
        """The index file (default ``PATH.wmreplay.idx``)."""
    def search(
        self,
        query: str,
        *,
        limit: int = 10,
        kinds: Optional[List[str]] = None,
        session: Optional[str] = None,
        since: Optional[float] = None,
        until: Optional[float] = None,
    ) -> List[Hit]:
        """Brings the index up to date, then searches it: ``wmreplay.search()``'s hits."""
    def asearch(self, query: str, **options: Any) -> Awaitable[List[Hit]]:
        """``search()`` in a thread (``asyncio.to_thread``)."""
    def refresh(self) -> IndexRefreshed:
        """Brings the index up to date: ``{"rebuilt", "bytes", "records"}`` read by this call."""
    def arefresh(self) -> Awaitable[IndexRefreshed]:
        """``refresh()`` in a thread (``asyncio.to_thread``)."""
