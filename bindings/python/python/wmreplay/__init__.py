"""wmreplay: replay an append-only JSONL working-memory log into the messages
of an LLM request, in process, with the Rust engine.

    >>> import wmreplay
    >>> r = wmreplay.replay("working_memory.log")
    >>> r.stats["parsed_entries"]
    >>> r.messages()[0]        # the Anthropic Messages shape, ready for a request
    {'role': 'user', 'content': [{'type': 'text', 'text': 'WM_KIND=text_input\\nts_ms: ...'}]}
    >>> body = wmreplay.request_body("working_memory.log", "What next?", session_id="s-42",
    ...                              model="claude-sonnet-5-5", max_tokens=8000, cache="auto")
    >>> wmreplay.append("working_memory.log", {"type": "wm_event", "event": "scene_change"})
    >>> wmreplay.search("working_memory.log", "scene change", limit=5)[0]["record"]

A missing log is an empty replay (``stats["log_missing"]``), with a
``MissingLogWarning`` (``warn=False`` silences it; ``require_log=True`` raises
``FileNotFoundError`` instead); lines that are not records are skipped and
counted in ``stats``, never fatal (a log most of whose lines are not records
raises a ``SkippedLinesWarning``). An unreadable log raises ``OSError`` whose
``filename`` is the path (``FileError``, an ``OSError``, when there is no errno:
a log that changed while it was read, a damaged state store or index). ``LiveReplay`` keeps a replay across calls and parses
only what was appended. ``search`` finds the records best matching a query
through an index kept next to the log; ``SearchIndex`` keeps it open.
``records`` lists a log's records (filtered, in replay or log order).
``wmreplay.sessions`` keeps agent frameworks' sessions in a log: an OpenAI
Agents SDK session and a LangChain message history. Every blocking call has
an ``async`` twin (``areplay``, ``arequest_body``, ``aappend``, ``asearch``,
``arecords``, ``Replay.arequest_body``, ``LiveReplay.arefresh``,
``LiveReplay.arequest_body``, ``SearchIndex.asearch``,
``SearchIndex.arefresh``) that runs it in a thread (``asyncio.to_thread``),
the GIL released. The shapes of the results are in ``wmreplay.types``.
"""

import asyncio
import functools

from . import sessions, types
from ._wmreplay import (
    SYSTEM_RULE,
    FileError,
    LiveReplay,
    MessageIter,
    Replay,
    SearchIndex,
    MissingLogWarning,
    SkippedLinesWarning,
    __version__,
    append,
    build_current_user_request_message,
    records,
    replay,
    request_body,
    search,
)

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
    "MissingLogWarning",
    "FileError",
    "__version__",
    "types",
    "sessions",
]


async def _in_thread(f, *args, **kwargs):
    # The native call releases the GIL while it works: the event loop and
    # other threads keep running.
    return await asyncio.to_thread(functools.partial(f, *args, **kwargs))


async def areplay(path, record="raw", threads=0, *, require_log=False, warn=True):
    """``replay()`` in a thread: ``await wmreplay.areplay(path)``."""
    return await _in_thread(replay, path, record, threads, require_log=require_log, warn=warn)


async def arequest_body(path, text, session_id=None, **options):
    """``request_body()`` in a thread."""
    return await _in_thread(request_body, path, text, session_id, **options)


async def aappend(path, records):
    """``append()`` in a thread."""
    return await _in_thread(append, path, records)


async def asearch(path, query, **options):
    """``search()`` in a thread: ``await wmreplay.asearch(path, query, limit=5)``."""
    return await _in_thread(search, path, query, **options)


async def arecords(path, **options):
    """``records()`` in a thread: ``await wmreplay.arecords(path, kinds=[...])``."""
    return await _in_thread(records, path, **options)
