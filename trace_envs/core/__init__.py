"""Env core: message protocol, tool-call parsing, spaces, tools, the ToolUseEnv base class."""

from trace_envs.core import space_memory  # noqa: F401, I001  (async vector envs: shared-memory support)
from trace_envs.core.parsing import ParsedTurn, ToolCall, format_tool_call, parse_action, parse_assistant_text
from trace_envs.core.spaces import MessageList, MessageText
from trace_envs.core.tool_env import STOP_TOKEN, Episode, Score, ToolUseEnv, UserReply
from trace_envs.core.tools import ToolBox, ToolError, ToolSpec

__all__ = [
    "STOP_TOKEN",
    "Episode",
    "MessageList",
    "MessageText",
    "ParsedTurn",
    "Score",
    "ToolBox",
    "ToolCall",
    "ToolError",
    "ToolSpec",
    "ToolUseEnv",
    "UserReply",
    "format_tool_call",
    "parse_action",
    "parse_assistant_text",
]
