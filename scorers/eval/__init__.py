"""Reference-based evaluation: eval sets (ADK ``EvalSet`` JSON), criteria, case scoring, online regression.

* :mod:`scorers.eval.model`: the pydantic data model (:class:`EvalSet`, :class:`EvalCase`,
  :class:`Invocation`, :class:`ToolCall`), :class:`EvalConfig`, and the loaders of current and
  legacy ADK files, with errors naming file, JSON path and what was expected.
* :mod:`scorers.eval.text`: the ROUGE-1 tokenizer and score.
* :mod:`scorers.eval.criteria`: each criterion as a pure function.
* :mod:`scorers.eval.actual`: what an agent actually did, read from normalised runs (traces).
* :mod:`scorers.eval.evaluate`: a case scored against its actual turns.
* :mod:`scorers.eval.judged`: the LLM-judged criteria through :mod:`scorers.judge`.
* :mod:`scorers.eval.online`: production runs matched to cases and scored in the pipeline.
"""
