"""The Qwen3-style chat template of our tiny models, and the one text renderer every caller uses.

Layout (Qwen3/Hermes tool-calling, compact JSON to save tokens for tiny models; ``chat_template("compact")``
lists each tool as name, description and argument types only)::

    <|im_start|>system
    {system prompt}

    # Tools
    ...
    <tools>
    {tool schema as one JSON line}
    </tools>
    ...<|im_end|>
    <|im_start|>user
    {text}<|im_end|>
    <|im_start|>assistant
    {text}
    <tool_call>
    {"name":"f","arguments":{...}}
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    {tool output}
    </tool_response><|im_end|>
    <|im_start|>assistant

An assistant message whose ``content`` already contains ``<tool_call>`` (raw policy text, as our
rollout backends record it) is rendered verbatim, so a recorded episode re-renders to exactly the
text the policy produced; otherwise its structured ``tool_calls`` are rendered after the content.
Consecutive tool messages share one user turn, as in Qwen3.
"""

from __future__ import annotations

from typing import Any, Sequence

from transformers.utils.chat_template_utils import render_jinja_template

_TEMPLATE = (
    "{%- set ns = namespace(start=0) -%}"
    "{%- if messages and messages[0].role == 'system' -%}{%- set ns.start = 1 -%}{%- endif -%}"
    "{%- if tools or ns.start == 1 -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if ns.start == 1 -%}{{- messages[0].content or '' -}}{%- endif -%}"
    "{%- if tools -%}"
    "{%- if ns.start == 1 -%}{{- '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\nYou may call one or more functions. Function signatures:\\n<tools>' -}}"
    "@@TOOLS@@"
    "{{- '\\n</tools>\\n\\nTo call a function, reply with:\\n<tool_call>\\n"
    "{\"name\":<function-name>,\"arguments\":<args-json-object>}\\n</tool_call>' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages[ns.start:] -%}"
    "{%- if message.role == 'assistant' -%}"
    "{%- set content = message.content if message.content is string else '' -%}"
    "{{- '<|im_start|>assistant\\n' + content -}}"
    "{%- if message.tool_calls and '<tool_call>' not in content -%}"
    "{%- for tc in message.tool_calls -%}"
    "{%- set fn = tc.function if tc.function is defined else tc -%}"
    "{%- if content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\":' + (fn.name | tojson) + ',\"arguments\":' -}}"
    "{%- if fn.arguments is string -%}{{- fn.arguments -}}"
    "{%- else -%}{{- fn.arguments | tojson(separators=(',', ':')) -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{%- set body = message.content if message.content is string else (message.content | tojson) -%}"
    "{{- '\\n<tool_response>\\n' + body + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


# One JSON line per tool: the full OpenAI schema (Qwen3 style) ...
_TOOLS_FULL = "{%- for tool in tools -%}{{- '\\n' + (tool | tojson(separators=(',', ':'))) -}}{%- endfor -%}"
# ... or name, description and {argument: type} only (about half the tokens; for tiny models).
_TOOLS_COMPACT = (
    "{%- for tool in tools -%}"
    "{%- set fn = tool.function if tool.function is defined else tool -%}"
    "{%- set params = fn.parameters if fn.parameters is defined and fn.parameters else {} -%}"
    "{%- set props = params.properties if params.properties is defined else {} -%}"
    "{{- '\\n{\"name\":' + (fn.name | tojson) + ',\"description\":' + ((fn.description or '') | tojson)"
    " + ',\"parameters\":{' -}}"
    "{%- for key, spec in props.items() -%}"
    "{{- (key | tojson) + ':' + ((spec.type if spec.type is defined else 'any') | tojson) -}}"
    "{%- if not loop.last -%}{{- ',' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{{- '}}' -}}"
    "{%- endfor -%}"
)
TOOLS_STYLES = ("full", "compact", "none")


def chat_template(tools_style: str = "full") -> str:
    """Our template; tools rendered ``full`` (whole JSON schema), ``compact`` (name, description, arg
    types) or ``none`` (never rendered: the policy learns the tools from data).

    The style travels with the tokenizer (``tokenizer.chat_template``), so behaviour cloning, rollouts
    and evaluation of one policy always render alike without extra flags.
    """
    if tools_style not in TOOLS_STYLES:
        raise ValueError(f"tools_style must be one of {TOOLS_STYLES}, got {tools_style!r}")
    if tools_style == "none":
        return "{%- set tools = none -%}" + _TEMPLATE.replace("@@TOOLS@@", "")
    return _TEMPLATE.replace("@@TOOLS@@", _TOOLS_FULL if tools_style == "full" else _TOOLS_COMPACT)


CHAT_TEMPLATE = chat_template("full")


def render_chat(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    chat_template: str | None = None,
) -> str:
    """Render ``messages`` (OpenAI dicts) as text with ``chat_template`` (default: ours).

    Uses the same jinja machinery as ``tokenizer.apply_chat_template`` so a hub model's own template
    renders identically here.
    """
    rendered, _ = render_jinja_template(
        conversations=[list(messages)],
        tools=list(tools) if tools else None,
        chat_template=chat_template or CHAT_TEMPLATE,
        add_generation_prompt=add_generation_prompt,
    )
    return rendered[0]
