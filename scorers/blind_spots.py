"""What a run's trace cannot show: "this trace cannot show X, because …".

Detection reads what the trace carries; some facts a trace does not carry at all (a callback
guardrail that answers instead of the model records no span; with content capture off no text
rule can see a refusal). Rather than stay silent, ``vigil explain`` and the run page list these
blind spots. They are read from the shape of the run — which kinds of spans it has and which of
their fields are filled — never from the words in it, so they hold for every framework. The same
facts are how the captured-traces suite sets runs aside (``tests/fixtures/traces/unobservable.json``).

:func:`shape_of_run` reads a :class:`~scorers.model.Run`; ``review_queue`` builds a :class:`Shape`
from a stored run and its details document; :func:`blind_spots` turns either into sentences.
"""

from __future__ import annotations

from dataclasses import dataclass

from scorers.model import Run, StepKind
from scorers.signals import skipped_type

__all__ = ["Shape", "blind_spots", "shape_of_run"]


@dataclass(frozen=True, slots=True)
class Shape:
    """What kinds of evidence one run's trace holds.

    Attributes:
        content_captured: any LLM span or the run carries message text.
        llm_calls: model calls counted.
        answered: model calls that did not fail (a failed call has no finish reason or usage to record).
        with_reasons / with_tokens: answered LLM calls that record a finish reason / token usage.
        guardrail_spans: spans classified as guardrails.
        skipped: model spans that ended with the framework's skip exception (no request made).
        errored / hit_max_iterations / safety_blocked: the run's headline signals.
    """

    content_captured: bool
    llm_calls: int
    answered: int
    with_reasons: int
    with_tokens: int
    guardrail_spans: int
    skipped: int
    errored: bool
    hit_max_iterations: bool
    safety_blocked: bool


def shape_of_run(run: Run) -> Shape:
    """The :class:`Shape` of a normalised run."""
    llm = [s for s in run.steps if s.kind is StepKind.LLM and not s.error]
    return Shape(
        content_captured=bool(run.messages) or bool(run.final_output),
        llm_calls=run.llm_calls,
        answered=len(llm),
        with_reasons=sum(1 for s in llm if s.finish_reasons),
        with_tokens=sum(1 for s in llm if s.input_tokens or s.output_tokens),
        guardrail_spans=sum(1 for s in run.steps if s.kind is StepKind.GUARDRAIL),
        skipped=sum(1 for s in run.steps if s.error and s.kind is not StepKind.LLM and skipped_type(s.error_type)),
        errored=run.errored,
        hit_max_iterations=run.hit_max_iterations,
        safety_blocked=run.safety_blocked,
    )


def blind_spots(shape: Shape) -> tuple[str, ...]:
    """The facts this run's trace cannot show, each as "this trace cannot show X, because …".

    Only for signals that are not set (a set signal was shown), and only from the run's shape.
    """
    out: list[str] = []
    no_guard = shape.guardrail_spans == 0
    if not shape.safety_blocked and no_guard:
        if shape.llm_calls == 0 and shape.skipped == 0 and not shape.errored:
            out.append(
                "this trace cannot show whether a guardrail answered instead of the model, because it has no "
                "model span and no guardrail span (a callback guardrail, such as ADK's before_model_callback, "
                "records nothing)"
            )
        elif not shape.content_captured and shape.llm_calls:
            out.append(
                "this trace cannot show a block by a callback guardrail or a refusal in the answer's text, because "
                "content capture is off and no guardrail span was recorded"
            )
    if shape.skipped:
        out.append(
            f"this trace cannot show why {shape.skipped} model request(s) were skipped (a guard or a cache "
            "answered instead of the model), because the framework's skip exception carries no reason"
        )
    if shape.answered and shape.with_reasons == 0 and not (shape.safety_blocked and shape.hit_max_iterations):
        out.append(
            "this trace cannot show a content filter or a cut-off tool loop by finish reason, because its LLM "
            "spans record no finish reason"
        )
    if shape.answered and shape.with_tokens == 0:
        out.append("this trace cannot show token usage or cost, because its LLM spans record none")
    return tuple(out)
