"""Text for Markdown reports: agent output is attacker-controlled, so it is escaped before it is written."""

from __future__ import annotations

__all__ = ["markdown_text"]

_MD_SPECIAL = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "|": "\\|",
        "`": "\\`",
        "*": "\\*",
        "_": "\\_",
        "[": "\\[",
        "]": "\\]",
        "#": "\\#",
        "\\": "\\\\",
        "\n": " ",
        "\r": " ",
    }
)


def markdown_text(text: str, limit: int = 300) -> str:
    """Text (agent output, ids) for a Markdown table cell or list item: HTML, emphasis, links, code
    spans and cell breaks escaped, on one line, cut to ``limit`` characters."""
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.translate(_MD_SPECIAL)
