"""``vigil eval add --from-session ID EVALSET``: a stored session appended as one multi-turn case;
:func:`append_case`, the append both ``--from-run`` and ``--from-session`` end with.

The case is built by :func:`review_queue.export_session.case_from_session` from what the store
holds (redacted before it was written); it is skipped when the eval set already has a case with
the same id or the same content (:func:`scorers.eval.manage.merge_cases`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from review_queue.export import eval_set
from review_queue.export_session import case_from_session
from scorers.eval.manage import merge_cases
from scorers.eval.model import CaseMetadata, EvalFileError, load_eval_set, parse_eval_set

__all__ = ["add_from_session", "append_case"]

EXIT_FAILED = 1
EXIT_INPUT = 2


def add_from_session(args: argparse.Namespace) -> int:
    """Append the session ``args.session_id`` to ``args.evalset`` (``--eval-id``: the case id;
    ``--dimension`` / ``--tag``: its metadata, as for ``--from-run``).

    Returns:
        0 when added or already there; 1 when the session is unknown or unfit (the one-line reason
        on stderr); 2 when the eval set file is malformed.
    """
    from vigil.tools import review_store

    store = review_store(args)
    try:
        case, why = case_from_session(store.engine, args.session_id, time.time())
    finally:
        store.close()
    if case is None:
        reason = "no stored run has this session id" if why == "unknown_session" else why
        print(f"vigil eval add: session {args.session_id!r}: {reason}", file=sys.stderr)
        return EXIT_FAILED
    turns = len(case["conversation"])
    return append_case(args, case, f" ({turns} turn{'' if turns == 1 else 's'})")


def append_case(args: argparse.Namespace, case: dict[str, Any], what: str = "") -> int:
    """Append ``case`` to ``args.evalset`` (created when missing) under ``--eval-id`` with the
    ``--dimension`` / ``--tag`` metadata: what ``vigil eval add`` does once it has built a case from a
    run or a session. ``what`` follows the case id in the message (e.g. its turns).

    Returns:
        0 when added or already there (same id or same content); 2 when the eval set file is malformed.
    """
    if args.eval_id:
        case["eval_id"] = args.eval_id
    if getattr(args, "dimension", None) or getattr(args, "tags", None):
        meta = CaseMetadata(dimension=args.dimension or "capability", tags=list(dict.fromkeys(args.tags)))
        case["metadata"] = meta.model_dump(mode="json", exclude_none=True)
    try:
        if args.evalset.exists():
            target = load_eval_set(args.evalset)
        else:
            target = parse_eval_set(eval_set([], args.evalset.stem, time.time()))
        new = parse_eval_set(eval_set([case], "new", time.time())).eval_cases
    except EvalFileError as exc:
        print(f"vigil eval add: {exc}", file=sys.stderr)
        return EXIT_INPUT
    merged = merge_cases(target, new)
    if not merged.added:
        print(f"{args.evalset} already has this case (same id or same content); nothing added", file=sys.stderr)
        return 0
    args.evalset.write_text(
        json.dumps(merged.eval_set.document(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    print(
        f"added case {case['eval_id']}{what} to {args.evalset} ({len(merged.eval_set.eval_cases)} case(s))",
        file=sys.stderr,
    )
    return 0
