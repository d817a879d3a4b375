"""Prometheus metrics of runs, scores, flags and the stream worker.

Every metric takes the registry. Label sets are bounded: agent and tool names are capped
(:class:`LabelCap`) with an ``other`` overflow; trace ids only ever appear in exemplars.
Run-level counters are incremented only for runs new to the index (a re-delivered or
re-scored run is not counted twice).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from scorers.model import Run, ScoredRun
from scorers.pricing import Price, PriceTable
from scorers.slo import task_completed

OVERFLOW = "other"

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)
STEP_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 75, 100)
RATIO_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
TOKEN_BUCKETS = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)
ASSEMBLER_EVENTS = (
    "late_spans",
    "late_evicted",
    "duplicate_spans",
    "spans_dropped_cap",
    "evicted_inflight",
    "evicted_inflight_bytes",
    "closed_early",
    "evicted_idle",
    "pressure_raised",
    "closed_cache_evicted",
    "closed_frozen",
    "pinned_evicted",
    "held_owed",
)
"""The ``event`` values of ``vigil_assembler_events_total`` (created at zero up front, so that
``increase()`` and alerts count the first event too)."""

DEFAULT_MAX_AGENTS = 50
"""Distinct agent label values before ``other``."""
DEFAULT_MAX_TOOLS = 100
"""Distinct tool label values before ``other``."""

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 2.25, 2.5, 3, 4, 5, 7.5, 10, 30, 60, 300)


class LabelCap:
    """Admits up to ``limit`` distinct label values; later ones map to ``other``. Thread-safe."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        """Return ``value`` if admitted, else ``other``."""
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(value)
                return value
        return OVERFLOW


class RunMetrics:
    """Metrics the stream worker updates.

    Args:
        registry: where to register.
        max_agents: distinct ``agent`` label values before ``other``.
        max_tools: distinct ``tool`` label values before ``other``.
        prices: per-model prices merged over :data:`scorers.pricing.DEFAULT_PRICES`, for
            ``vigil_estimated_cost_usd_total``.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        max_agents: int = DEFAULT_MAX_AGENTS,
        max_tools: int = DEFAULT_MAX_TOOLS,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        self.prices = PriceTable(prices)
        self.agent = LabelCap(max_agents)
        self.tool = LabelCap(max_tools)
        r = registry
        self.runs = Counter(
            "vigil_runs", "Runs scored, by agent and outcome.", ["agent", "outcome", "complete"], registry=r
        )
        self.completions = Counter(
            "vigil_task_completions",
            "Runs that completed their task: ended normally with a final answer, no error, limit or block "
            "(scorers.slo.task_completed); a later failing verdict is counted in "
            "vigil_task_completions_revoked_total.",
            ["agent"],
            registry=r,
        )
        self.revoked = Counter(
            "vigil_task_completions_revoked",
            "Runs counted in vigil_task_completions_total whose first failing verdict (source: judge, review)"
            " came later.",
            ["agent", "source"],
            registry=r,
        )
        self.duration = Histogram(
            "vigil_run_duration_seconds", "Run duration.", ["agent"], buckets=DURATION_BUCKETS, registry=r
        )
        self.steps = Histogram(
            "vigil_run_steps", "LLM calls (steps) per run.", ["agent"], buckets=STEP_BUCKETS, registry=r
        )
        self.efficiency = Histogram(
            "vigil_run_step_efficiency", "Step efficiency per run (0-1).", ["agent"], buckets=RATIO_BUCKETS, registry=r
        )
        self.run_tokens = Histogram("vigil_run_tokens", "Tokens per run.", ["agent"], buckets=TOKEN_BUCKETS, registry=r)
        self.tokens = Counter("vigil_tokens", "Tokens used by LLM calls.", ["agent", "direction"], registry=r)
        self.cost = Counter(
            "vigil_estimated_cost_usd", "Estimated USD spent on LLM calls (model price table).", ["agent"], registry=r
        )
        self.unpriced = Counter(
            "vigil_unpriced_tokens", "Tokens of LLM calls whose model has no price.", ["agent"], registry=r
        )
        self.tool_calls = Counter("vigil_tool_calls", "Tool calls executed.", ["agent", "tool"], registry=r)
        self.tool_errors = Counter("vigil_tool_errors", "Tool calls that failed.", ["agent", "tool"], registry=r)
        self.safety_blocks = Counter("vigil_safety_blocks", "Runs blocked by a safety filter.", ["agent"], registry=r)
        self.max_iter = Counter("vigil_max_iterations_hits", "Runs that hit an iteration cap.", ["agent"], registry=r)
        self.flagged = Counter("vigil_flagged_runs", "Runs flagged for review.", ["agent", "priority"], registry=r)
        self.flags = Counter(
            "vigil_flags", "Flag reasons recorded (one run may have several).", ["reason", "priority"], registry=r
        )
        self.rescored = Counter("vigil_runs_rescored", "Runs re-scored after late spans.", registry=r)
        self.detections = Counter(
            "vigil_detections",
            "Runs in which a detection rule set a headline signal (rule: scorers.detect ids, user.* for the "
            "user's own markers).",
            ["signal", "rule"],
            registry=r,
        )
        self.errors = Counter(
            "vigil_scorer_errors", "Scorer, rule and normaliser failures.", ["stage", "name"], registry=r
        )
        self.assembler = Counter(
            "vigil_assembler_events",
            "Assembler events: late/duplicate/dropped spans, runs closed early or evicted, intake pressure raised.",
            ["event"],
            registry=r,
        )
        for event in ASSEMBLER_EVENTS:
            self.assembler.labels(event)
        self.flag_latency = Histogram(
            "vigil_flag_latency_seconds",
            "Root span end to review item committed.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.store_errors = Counter("vigil_store_write_errors", "Failed store writes (retried).", registry=r)
        self.store_seconds = Histogram("vigil_store_write_seconds", "Store write time per batch.", registry=r)
        self.inflight = Gauge("vigil_runs_in_flight", "Runs being assembled.", registry=r)
        self.late_age = Gauge(
            "vigil_late_cache_age_seconds",
            "Age of the scored run the late-span cache forgets next: about how late a span may come and still be "
            "merged into its run (0: no run kept).",
            registry=r,
        )
        # Bound label children cached per agent/tool: labels() costs more than inc().
        # Both caches are bounded by the label caps (plus the overflow value).
        self._by_agent: dict[str, _AgentChildren] = {}
        self._by_tool: dict[tuple[str, str], tuple[Counter, Counter]] = {}
        # Bounded too: agents x 4 outcomes x 2, and (agent or rule name) x 3 priorities.
        self._by_outcome: dict[tuple[str, str, bool], Counter] = {}
        self._flagged_by: dict[tuple[str, str], Counter] = {}
        self._reason_by: dict[tuple[str, str], Counter] = {}
        # (signal, rule label) -> its vigil_detections child; rule ids are a bounded set, the cache is capped anyway.
        self._detected_by: dict[tuple[str, str], Counter] = {}

    def bind_inflight(self, fn: Callable[[], float]) -> None:
        """Compute ``vigil_runs_in_flight`` at scrape time from ``fn``."""
        self.inflight.set_function(fn)

    def bind_late_age(self, fn: Callable[[], float]) -> None:
        """Compute ``vigil_late_cache_age_seconds`` at scrape time from ``fn``."""
        self.late_age.set_function(fn)

    def completion_revoked(self, agent: str, source: str = "judge") -> None:
        """Count a completion revoked by a failing verdict (``scorers.slo``)."""
        self.revoked.labels(self.agent(agent), source).inc()

    def assembler_event(self, event: str, count: int = 1) -> None:
        """Count an assembler event (see :class:`scorers.assemble.Assembler`)."""
        self.assembler.labels(event).inc(count)

    def error(self, stage: str, name: str, _exc: Exception) -> None:
        """Count a scorer/rule/normaliser failure (``Pipeline.on_error``)."""
        self.errors.labels(stage, name).inc()

    def _agent_children(self, agent: str) -> _AgentChildren:
        children = self._by_agent.get(agent)
        if children is None:
            children = self._by_agent[agent] = _AgentChildren(self, agent)
        return children

    def _tool_children(self, agent: str, tool: str) -> tuple[Counter, Counter]:
        key = (agent, tool)
        pair = self._by_tool.get(key)
        if pair is None:
            pair = self._by_tool[key] = (self.tool_calls.labels(agent, tool), self.tool_errors.labels(agent, tool))
        return pair

    def observe_run(self, scored: ScoredRun) -> None:
        """Record a run new to the index (exemplars carry the trace id)."""
        run = scored.run
        agent = self.agent(run.agent)
        c = self._agent_children(agent)
        exemplar = {"trace_id": run.trace_id}
        outcome = (agent, run.status.value, run.complete)
        runs = self._by_outcome.get(outcome)
        if runs is None:
            runs = self._by_outcome[outcome] = self.runs.labels(agent, outcome[1], "true" if run.complete else "false")
        runs.inc()
        if task_completed(run):
            c.completions.inc()
        c.duration.observe(run.duration_s, exemplar)
        c.steps.observe(run.llm_calls, exemplar)
        c.run_tokens.observe(run.input_tokens + run.output_tokens, exemplar)
        eff = scored.scores.get("step_efficiency")
        if eff is not None:
            c.efficiency.observe(eff, exemplar)
        if run.input_tokens:
            c.tokens_in.inc(run.input_tokens)
        if run.output_tokens:
            c.tokens_out.inc(run.output_tokens)
        if run.input_tokens or run.output_tokens:
            cost = self.prices.run_cost(run)
            if cost.usd:
                c.cost.inc(cost.usd)
            if cost.unpriced_tokens:
                c.unpriced.inc(cost.unpriced_tokens)
        if run.tools:
            self._observe_tools(agent, run)
        if run.safety_blocked:
            c.safety_blocks.inc()
        if run.hit_max_iterations:
            c.max_iter.inc()
        if run.evidence:
            self._observe_detections(run)

    def _observe_detections(self, run: Run) -> None:
        """One increment per (signal, rule) that fired on the run (rule ids are a bounded set)."""
        seen: set[tuple[str, str]] = set()
        for e in run.evidence:
            key = (e.signal, _rule_label(e.rule))
            if key in seen:
                continue
            seen.add(key)
            child = self._detected_by.get(key)
            if child is None:
                child = self.detections.labels(*key)
                if len(self._detected_by) < _MAX_DETECTION_CHILDREN:
                    self._detected_by[key] = child
            child.inc()

    def _observe_tools(self, agent: str, run: Run) -> None:
        """Count a run's tool calls and errors: one increment per distinct tool, not per call."""
        calls: dict[str, int] = {}
        errors: dict[str, int] = {}
        for tool in run.tools:
            calls[tool.name] = calls.get(tool.name, 0) + 1
            if tool.error is not None:
                errors[tool.name] = errors.get(tool.name, 0) + 1
        for name, count in calls.items():
            call_counter, error_counter = self._tool_children(agent, self.tool(name))
            call_counter.inc(count)
            failed = errors.get(name)
            if failed:
                error_counter.inc(failed)

    def observe_flag(self, scored: ScoredRun) -> None:
        """Record a flag decision new to the queue."""
        flag = scored.flag
        if flag is None:
            return
        priority = flag.priority.value
        key = (self.agent(scored.run.agent), priority)
        flagged = self._flagged_by.get(key)
        if flagged is None:
            flagged = self._flagged_by[key] = self.flagged.labels(*key)
        flagged.inc()
        for reason in flag.reasons:
            child = self._reason_by.get((reason, priority))
            if child is None:
                child = self._reason_by[(reason, priority)] = self.flags.labels(reason, priority)
            child.inc()


class _AgentChildren:
    """The per-agent children of :class:`RunMetrics`' metrics."""

    __slots__ = (
        "completions",
        "cost",
        "duration",
        "efficiency",
        "max_iter",
        "run_tokens",
        "safety_blocks",
        "steps",
        "tokens_in",
        "tokens_out",
        "unpriced",
    )

    def __init__(self, m: RunMetrics, agent: str) -> None:
        self.completions = m.completions.labels(agent)  # created at 0: the completion ratio exists from the first run
        self.duration = m.duration.labels(agent)
        self.steps = m.steps.labels(agent)
        self.efficiency = m.efficiency.labels(agent)
        self.run_tokens = m.run_tokens.labels(agent)
        self.tokens_in = m.tokens.labels(agent, "input")
        self.tokens_out = m.tokens.labels(agent, "output")
        self.safety_blocks = m.safety_blocks.labels(agent)
        self.max_iter = m.max_iter.labels(agent)
        self.cost = m.cost.labels(agent)
        self.unpriced = m.unpriced.labels(agent)


_MAX_RULE_LABEL = 48
_MAX_DETECTION_CHILDREN = 1024
"""Cached ``vigil_detections`` children at most (signals x built-in and user rule ids are far fewer)."""


def _rule_label(rule: str) -> str:
    """Detection rule ids are a fixed set (built-ins plus ``user.<signal>.<kind>``); cap anything else."""
    return rule if len(rule) <= _MAX_RULE_LABEL else "other"
