from collections.abc import Callable, Mapping
from typing import Any

def decode(
    body: bytes | bytearray,
    traces: dict[str, list[Any]],
    reject: Callable[[bytes, bytes, bytes], None],
    new_span: Callable[..., Any],
    new_event: Callable[[str, int, dict[str, Any]], Any],
    kinds: Mapping[object, Any],
    codes: Mapping[object, Any],
    max_depth: int,
    max_value: int,
    /,
) -> int: ...

VERSION: int

def constructor(cls: type[Any], names: tuple[str, ...], /) -> Callable[..., Any]: ...
def pair(raw: bytes, max_depth: int, max_value: int, /) -> tuple[str, Any, int] | None: ...
