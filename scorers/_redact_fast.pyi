from collections.abc import Callable, Mapping

VERSION: int

def scan(
    text: str, /
) -> tuple[bool, list[tuple[int, int]] | None, list[tuple[int, int]] | None, list[tuple[int, int]] | None] | None: ...
def stored_attributes(
    attrs: dict[str, object],
    keys: dict[str, str],
    values: dict[str, str],
    text: Callable[[str], str],
    key: Callable[[str], str | None],
    value: Callable[[object, object, int], object],
    dropped: str,
    builtins: bool,
    max_attributes: int,
    max_list_items: int,
    cached_chars: int,
    max_value_chars: int,
    cache_entries: int,
    redact: Callable[..., str],
    /,
) -> tuple[Mapping[str, object], int]: ...
def genai_pairs(
    items: list[object],
    message_of: Callable[[object], object],
    as_text: Callable[[object], str | None],
    max_text: int,
    /,
) -> list[tuple[str, str]]: ...
