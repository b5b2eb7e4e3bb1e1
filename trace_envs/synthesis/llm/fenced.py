"""The one reader of fenced code blocks in an LLM's answer (the env generator's module, the SWE scenario's JSON)."""

from __future__ import annotations


def longest_fenced_block(answer: str, headers: tuple[str, ...]) -> str | None:
    """The longest ```<header> block of ``answer`` whose header (lower-cased) is one of ``headers`` (``""``: a bare
    fence); None when there is none. An unterminated fence ends the search."""
    blocks, rest = [], answer
    while "```" in rest:
        _, _, after = rest.partition("```")
        header, _, body = after.partition("\n")
        code, sep, rest = body.partition("```")
        if not sep:
            break
        if header.strip().lower() in headers:
            blocks.append(code)
    return max(blocks, key=len) if blocks else None
