from . import types as types
from ._wmreplay import SYSTEM_RULE as SYSTEM_RULE
from ._wmreplay import LiveReplay as LiveReplay
from ._wmreplay import MessageIter as MessageIter
from ._wmreplay import Replay as Replay
from ._wmreplay import replay as replay

__all__ = ["replay", "Replay", "LiveReplay", "MessageIter", "SYSTEM_RULE", "types"]
