VERSION: int

def scan(
    text: str, /
) -> tuple[bool, list[tuple[int, int]] | None, list[tuple[int, int]] | None, list[tuple[int, int]] | None] | None: ...
