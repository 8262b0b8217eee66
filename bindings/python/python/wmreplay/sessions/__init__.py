"""Agent frameworks' conversation sessions kept in a working-memory log.

A session's history is written to the log as records, one per item, and
read back by replaying them; nothing is ever deleted from the log:

- ``{"type": "session_item", "ts_ms": T, "session_id": S, "item": ITEM}``:
  one item added (``ITEM`` exactly as the framework handed it over);
- ``{"type": "session_pop", "ts_ms": T, "session_id": S, "popped": {"offset": O, "ts_ms": X}}``:
  the item of the ``session_item`` record at byte offset ``O`` (whose
  ``ts_ms`` is ``X``) removed from the session;
- ``{"type": "session_clear", "ts_ms": T, "session_id": S}``: every item of
  the session written before it removed.

A session's items are its ``session_item`` records in log order (the order
the lines were written in) less those a later ``session_pop`` names or a
later ``session_clear`` follows. Records are written by :func:`wmreplay.append`
(the log's lock, whole lines, stamped ``ts_ms``), so sessions, other
writers and ``wmreplay serve`` can share one log; they are read by
:func:`wmreplay.records`. Like every record, they are replayed into request
bodies (``WM_KIND=session_item``); ``kinds`` filters leave them out.

- :class:`SessionLog`: one session's items, blocking calls and ``async``
  twins; what the adapters below are made of.
- :class:`WmreplaySession`: an OpenAI Agents SDK session
  (``Runner.run(agent, input, session=...)``). Nothing of ``agents`` is
  imported: the SDK's ``Session`` is a protocol.
- :class:`WmreplayChatMessageHistory` (in :mod:`wmreplay.sessions.langchain`,
  which imports ``langchain_core``, loaded when first named): a LangChain
  ``BaseChatMessageHistory``.

Install the frameworks with the extras: ``pip install "wmreplay[agents]"``,
``pip install "wmreplay[langchain]"``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import warnings
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union, cast

from .._wmreplay import append, records

if TYPE_CHECKING:  # pragma: no cover
    from agents.items import TResponseInputItem

    from ..types import LogRecord
    from agents.memory import SessionSettings

    from .langchain import WmreplayChatMessageHistory

__all__ = [
    "SessionLog",
    "WmreplaySession",
    "WmreplayChatMessageHistory",
    "SessionRecordWarning",
    "SESSION_ITEM",
    "SESSION_POP",
    "SESSION_CLEAR",
    "SESSION_RECORD_TYPES",
]

SESSION_ITEM = "session_item"
"""The ``type`` of the record of one item added to a session."""
SESSION_POP = "session_pop"
"""The ``type`` of the record of an item popped from a session."""
SESSION_CLEAR = "session_clear"
"""The ``type`` of the record of a session cleared."""
SESSION_RECORD_TYPES = (SESSION_ITEM, SESSION_POP, SESSION_CLEAR)
"""The three, e.g. for ``kinds`` filters of :func:`wmreplay.records`."""

_Path = Union[str, "os.PathLike[str]"]
Item = Dict[str, Any]


class SessionRecordWarning(UserWarning):
    """A session record of the right ``type`` and ``session_id`` that cannot
    be applied (a ``session_item`` without ``item``, a ``session_pop``
    without ``popped.offset``): it is left out of the session, and the
    message names the log and the record's byte offset. The adapters never
    write one; another writer did."""


# One lock per log file for the read-then-append of a pop, so that the pops
# of one process (any of its sessions) never name the same item twice.
_pop_locks: Dict[str, threading.Lock] = {}
_pop_locks_guard = threading.Lock()


def _pop_lock(path: str) -> threading.Lock:
    key = os.path.realpath(path)
    with _pop_locks_guard:
        return _pop_locks.setdefault(key, threading.Lock())


def _check_limit(limit: Optional[int]) -> Optional[int]:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"`limit` must be an int or None, not {type(limit).__name__}")
    if limit < 0:
        raise ValueError(f"`limit` must be at least 0, not {limit}")
    return limit


class SessionLog:
    """The items of session ``session_id`` in the working-memory log at
    ``path`` (created on the first write; a log that does not exist holds
    an empty session).

    Every call reads the log again (one replay of its session records, in
    the engine, GIL released), so several ``SessionLog`` objects, threads
    and processes see each other's writes. The ``a``-prefixed methods run
    the same call in a thread (``asyncio.to_thread``).

    Items are JSON: what comes back is what was added, decoded from its
    line (a dict equal to the one added; tuples come back as lists, and
    keys must be strings). ``add`` raises ``TypeError`` for an item that
    is not a dict and ``ValueError`` naming the log for one JSON cannot
    hold (``bytes``, ``NaN``); nothing of the batch is written then.
    Reading raises ``OSError`` whose ``filename`` is the log when it cannot
    be read.
    """

    def __init__(self, path: _Path, session_id: str) -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"`session_id` must be a str, not {type(session_id).__name__}")
        self._path = os.fspath(path)
        if not isinstance(self._path, str):
            raise TypeError("`path` must be a str or os.PathLike[str]")
        self._session_id = session_id

    @property
    def path(self) -> str:
        """The log."""
        return self._path

    @property
    def session_id(self) -> str:
        """The session's id: the ``session_id`` of its records."""
        return self._session_id

    def __repr__(self) -> str:
        return f"SessionLog({self._path!r}, {self._session_id!r})"

    # Reading.

    def live(self) -> List[Tuple[LogRecord, Item]]:
        """The session's items with their records: ``[(entry, item)]`` in
        log order, ``entry`` as :func:`wmreplay.records` gives it
        (``{"offset", "ts_ms", "type", "record"}``)."""
        found = records(self._path, kinds=list(SESSION_RECORD_TYPES), session=self._session_id, order="log")
        live: Dict[int, Tuple[LogRecord, Item]] = {}
        for entry in found:
            record = entry["record"]
            # The engine's filter keeps records without a session_id too.
            if record.get("session_id") != self._session_id:
                continue
            kind = entry["type"]
            if kind == SESSION_ITEM:
                if "item" not in record:
                    self._skip(entry, "a session_item record without `item`")
                    continue
                live[entry["offset"]] = (entry, record["item"])
            elif kind == SESSION_POP:
                popped = record.get("popped")
                offset = popped.get("offset") if isinstance(popped, dict) else None
                if isinstance(offset, bool) or not isinstance(offset, int):
                    self._skip(entry, "a session_pop record without an integer `popped.offset`")
                    continue
                # An item popped already (two processes popped at once) is
                # popped once.
                live.pop(offset, None)
            elif kind == SESSION_CLEAR:
                live.clear()
        return list(live.values())

    def _skip(self, entry: LogRecord, what: str) -> None:
        warnings.warn(
            f"{self._path}: byte {entry['offset']}: {what} is left out of session {self._session_id!r}",
            SessionRecordWarning,
            stacklevel=4,
        )

    def items(self, limit: Optional[int] = None) -> List[Item]:
        """The session's items in the order they were added; with ``limit``,
        the latest ``limit`` of them, still in that order (``0``: none).
        ``limit`` must be ``None`` or an int of at least 0."""
        limit = _check_limit(limit)
        if limit == 0:
            return []
        items = [item for _, item in self.live()]
        return items if limit is None else items[-limit:]

    # Writing.

    def add(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Adds ``items`` (dicts) at the end of the session: one
        ``session_item`` record each, all in one append (one write under the
        log's lock, synced before it returns)."""
        batch = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise TypeError(f"item {i} must be a dict, not {type(item).__name__}")
            try:
                # What append() does with the record, checked here to name the item.
                json.dumps(item, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise ValueError(
                    f"{self._path}: item {i} of session {self._session_id!r} cannot be written "
                    f"as JSON ({e}); nothing was added"
                ) from e
            batch.append({"type": SESSION_ITEM, "session_id": self._session_id, "item": item})
        if batch:
            append(self._path, batch)

    def pop(self) -> Optional[Item]:
        """Removes the session's most recent item and returns it (``None``,
        and nothing written, when the session is empty): one
        ``session_pop`` record naming the item's record by its offset. The
        pops of one process take turns; two processes popping at once may
        both return the same item, which is then popped once."""
        with _pop_lock(self._path):
            live = self.live()
            if not live:
                return None
            entry, item = live[-1]
            append(
                self._path,
                {
                    "type": SESSION_POP,
                    "session_id": self._session_id,
                    "popped": {"offset": entry["offset"], "ts_ms": entry["ts_ms"]},
                },
            )
            return item

    def clear(self) -> None:
        """Removes every item of the session: one ``session_clear`` record
        (also for a session that is empty)."""
        append(self._path, {"type": SESSION_CLEAR, "session_id": self._session_id})

    # The same, in a thread.

    async def alive(self) -> List[Tuple[LogRecord, Item]]:
        """``live()`` in a thread."""
        return await asyncio.to_thread(self.live)

    async def aitems(self, limit: Optional[int] = None) -> List[Item]:
        """``items()`` in a thread."""
        _check_limit(limit)
        return await asyncio.to_thread(self.items, limit)

    async def aadd(self, items: Iterable[Mapping[str, Any]]) -> None:
        """``add()`` in a thread."""
        await asyncio.to_thread(self.add, list(items))

    async def apop(self) -> Optional[Item]:
        """``pop()`` in a thread."""
        return await asyncio.to_thread(self.pop)

    async def aclear(self) -> None:
        """``clear()`` in a thread."""
        await asyncio.to_thread(self.clear)


def _session_settings(settings: Any) -> Any:
    """``SessionSettings`` as the SDK's own sessions take it: an instance, or
    a dict turned into one (which needs ``agents``)."""
    if not isinstance(settings, dict):
        return settings
    try:
        from agents.memory import SessionSettings
    except ImportError as e:  # pragma: no cover - the dict form needs the SDK
        raise TypeError(
            "`session_settings` as a dict needs openai-agents (pip install \"wmreplay[agents]\"); "
            "pass agents.SessionSettings(limit=...)"
        ) from e
    return SessionSettings(**settings)


class WmreplaySession:
    """An OpenAI Agents SDK session (the ``agents.memory.Session``
    protocol) kept in the working-memory log at ``path``:

        >>> from agents import Agent, Runner
        >>> from wmreplay.sessions import WmreplaySession
        >>> session = WmreplaySession("user-42", "working_memory.log")
        >>> result = await Runner.run(agent, "Hello", session=session)

    The items are the SDK's input items (``TResponseInputItem`` dicts),
    kept exactly as the runner adds them, as ``session_item`` records
    (see :mod:`wmreplay.sessions`); ``pop_item`` and ``clear_session``
    write ``session_pop`` and ``session_clear`` records, nothing is
    deleted. ``get_items(limit)`` is ``SQLiteSession``'s: the latest
    ``limit`` items in chronological order, ``session_settings.limit`` when
    ``limit`` is ``None``. Every method runs its blocking read or append in
    a thread, so the event loop keeps running on a large log.

    ``session_settings``: ``agents.SessionSettings`` (or a dict of its
    fields), the SDK's per-session defaults.
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self, session_id: str, path: _Path, *, session_settings: SessionSettings | Dict[str, Any] | None = None
    ) -> None:
        self._log = SessionLog(path, session_id)
        self.session_id = session_id
        self.session_settings = _session_settings(session_settings)

    @property
    def path(self) -> str:
        """The log."""
        return self._log.path

    @property
    def log(self) -> SessionLog:
        """The session's :class:`SessionLog` (blocking calls)."""
        return self._log

    def __repr__(self) -> str:
        return f"WmreplaySession({self.session_id!r}, {self._log.path!r})"

    async def get_items(self, limit: Optional[int] = None) -> List[TResponseInputItem]:
        """The session's items in chronological order; with ``limit`` (or,
        without it, ``session_settings.limit``) the latest ``limit``."""
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        return cast("List[TResponseInputItem]", await self._log.aitems(limit))

    async def add_items(self, items: List[TResponseInputItem]) -> None:
        """Adds ``items`` at the end of the session, in one append."""
        await self._log.aadd(items)

    async def pop_item(self) -> Optional[TResponseInputItem]:
        """Removes the most recent item and returns it (``None`` when the
        session is empty)."""
        return cast("Optional[TResponseInputItem]", await self._log.apop())

    async def clear_session(self) -> None:
        """Removes every item of the session."""
        await self._log.aclear()


def __getattr__(name: str) -> Any:
    # The LangChain adapter imports langchain_core: loaded when named.
    if name == "WmreplayChatMessageHistory":
        from .langchain import WmreplayChatMessageHistory

        return WmreplayChatMessageHistory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
