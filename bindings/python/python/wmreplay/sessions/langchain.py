"""A LangChain chat message history kept in a working-memory log.

    >>> from wmreplay.sessions.langchain import WmreplayChatMessageHistory
    >>> history = WmreplayChatMessageHistory("user-42", "working_memory.log")
    >>> history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    >>> history.messages
    [HumanMessage(content='hi', ...), AIMessage(content='hello', ...)]

Needs ``langchain-core`` (``pip install "wmreplay[langchain]"``); importing
this module imports it. The records are those of :mod:`wmreplay.sessions`.
"""

from typing import Any, List, Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

from . import SessionLog, _Path

__all__ = ["WmreplayChatMessageHistory"]


class WmreplayChatMessageHistory(BaseChatMessageHistory):
    """The messages of session ``session_id`` in the working-memory log at
    ``path``, a LangChain ``BaseChatMessageHistory``.

    Each message added is one ``session_item`` record whose ``item`` is
    ``message_to_dict(message)`` (``{"type": "ai", "data": {...}}``), so
    that ``messages`` gives back equal messages: tool calls of an
    ``AIMessage``, a ``ToolMessage``'s ``tool_call_id`` and ``artifact``,
    metadata, ids. ``clear()`` writes a ``session_clear`` record; nothing is
    deleted from the log. Every read replays the log's session records, so
    histories of one session in several processes see each other's
    messages. The ``a``-prefixed methods run in a thread.

    Errors: a message that JSON cannot hold (``bytes`` in its
    ``additional_kwargs``) raises ``ValueError`` naming the log, nothing
    written; an item of the session that is not a LangChain message (a
    session written by another framework under the same id) raises
    ``ValueError`` naming the log and the record's byte offset.
    """

    def __init__(self, session_id: str, path: _Path) -> None:
        self._log = SessionLog(path, session_id)

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self._log.session_id

    @property
    def path(self) -> str:
        """The log."""
        return self._log.path

    @property
    def log(self) -> SessionLog:
        """The session's :class:`~wmreplay.sessions.SessionLog`."""
        return self._log

    def __repr__(self) -> str:
        return f"WmreplayChatMessageHistory({self._log.session_id!r}, {self._log.path!r})"

    def _messages(self, live: List[Any]) -> List[BaseMessage]:
        out = []
        for entry, item in live:
            try:
                out.extend(messages_from_dict([item]))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise ValueError(
                    f"{self._log.path}: byte {entry['offset']}: the item of session "
                    f"{self._log.session_id!r} is not a LangChain message dict "
                    f"({type(e).__name__}: {e})"
                ) from e
        return out

    @property
    def messages(self) -> List[BaseMessage]:  # type: ignore[override]
        """The session's messages, in the order they were added."""
        return self._messages(self._log.live())

    async def aget_messages(self) -> List[BaseMessage]:
        """``messages`` in a thread."""
        return self._messages(await self._log.alive())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Adds ``messages`` at the end, in one append."""
        self._log.add([message_to_dict(m) for m in messages])

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """``add_messages`` in a thread."""
        await self._log.aadd([message_to_dict(m) for m in messages])

    def clear(self) -> None:
        """Removes every message of the session (a ``session_clear`` record)."""
        self._log.clear()

    async def aclear(self) -> None:
        """``clear()`` in a thread."""
        await self._log.aclear()
