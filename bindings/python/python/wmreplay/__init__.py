"""wmreplay: replay an append-only JSONL working-memory log into the messages
of an LLM request, in process, with the Rust engine.

    >>> import wmreplay
    >>> r = wmreplay.replay("working_memory.log")
    >>> r.stats["parsed_entries"]
    >>> r.messages()[0]        # the Anthropic Messages shape, ready for a request
    {'role': 'user', 'content': [{'type': 'text', 'text': 'WM_KIND=text_input\\nts_ms: ...'}]}
    >>> body = r.request_body("What next?", session_id="s-42")   # bytes, ready to POST

A missing log is an empty replay; lines that are not records are skipped and
counted in ``stats``, never fatal. An unreadable log raises ``OSError`` whose
``filename`` is the path. ``LiveReplay`` keeps a replay across calls and
parses only what was appended. The shapes of the results are in
``wmreplay.types``.
"""

from . import types
from ._wmreplay import SYSTEM_RULE, LiveReplay, MessageIter, Replay, replay

__all__ = ["replay", "Replay", "LiveReplay", "MessageIter", "SYSTEM_RULE", "types"]
