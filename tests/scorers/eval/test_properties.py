"""Property tests of the matching modes: EXACT ⇒ IN_ORDER ⇒ ANY_ORDER, under every argument mode."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scorers.eval.criteria import (
    ActualTurn,
    match_any_order,
    match_exact,
    match_in_order,
    tool_precision,
    tool_recall,
)
from scorers.eval.model import ArgMatch, Content, CriterionConfig, IntermediateData, Invocation, ToolCall

values = st.one_of(st.integers(-3, 3), st.sampled_from(["x", "X", "y"]), st.booleans(), st.none())
calls = st.builds(
    lambda name, args: ToolCall(name=name, args=args),
    st.sampled_from(["a", "b", "c"]),
    st.dictionaries(st.sampled_from(["k", "l"]), values, max_size=2),
)
lists = st.lists(calls, max_size=5)
modes = st.sampled_from(list(ArgMatch))


@given(lists, lists, modes)
def test_exact_implies_in_order_implies_any_order(
    actual: list[ToolCall], expected: list[ToolCall], mode: ArgMatch
) -> None:
    if match_exact(actual, expected, mode):
        assert match_in_order(actual, expected, mode)
    if match_in_order(actual, expected, mode):
        assert match_any_order(actual, expected, mode)


@given(lists, modes)
def test_every_mode_accepts_itself(calls_: list[ToolCall], mode: ArgMatch) -> None:
    assert match_exact(calls_, calls_, mode)
    assert match_in_order(calls_, calls_, mode)
    assert match_any_order(calls_, calls_, mode)


@given(lists, lists, st.data())
def test_extra_calls_keep_in_order_and_any_order(
    expected: list[ToolCall], extra: list[ToolCall], data: st.DataObject
) -> None:
    # interleave extra calls into the expected ones, keeping the expected order
    actual = list(expected)
    for call in extra:
        actual.insert(data.draw(st.integers(0, len(actual))), call)
    assert match_in_order(actual, expected)
    assert match_any_order(actual, expected)
    shuffled = data.draw(st.permutations(actual))
    assert match_any_order(shuffled, expected)


@given(lists, lists)
def test_any_order_match_means_full_recall(actual: list[ToolCall], expected: list[ToolCall]) -> None:
    inv = Invocation(user_content=Content.of("q", "user"), intermediate_data=IntermediateData(tool_uses=expected))
    turn = ActualTurn("q", tuple(actual))
    cfg = CriterionConfig(threshold=1.0)
    if match_any_order(actual, expected, ArgMatch.IGNORE):
        assert 1.0 == tool_recall([turn], [inv], cfg).score
    if match_exact(actual, expected, ArgMatch.IGNORE):
        assert 1.0 == tool_precision([turn], [inv], cfg).score
