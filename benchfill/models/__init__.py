"""Talking to models: config, call cache, async client (litellm / vLLM / simulated), grading and ``evaluate``.

Import the submodules directly; this package imports nothing heavy (litellm, vllm) at import time:

- :mod:`benchfill.models.config`: ``load_config``, ``validate_config``, ``RunConfig``, ``ModelConfig``
- :mod:`benchfill.models.client`: ``ModelClient``, ``SyncModelClient``, ``CallResult``
- :mod:`benchfill.models.cache`: ``CallCache``, ``call_key``
- :mod:`benchfill.models.grading`: ``grade``, ``Grader``, ``GradeResult``
- :mod:`benchfill.models.replies`: ``reply_json`` (the JSON value in a reply), ``final_text`` (reasoning removed)
- :mod:`benchfill.models.prompts`: ``PromptLibrary``, ``render``, ``answer_messages``, ``rewrite_messages``...
- :mod:`benchfill.models.sim`: ``SimWorld``
- :mod:`benchfill.models.panel`: ``PanelEngine`` (the one scheduler of graded panel answers), ``PanelJob``
- :mod:`benchfill.models.evaluate`: ``evaluate``, ``run_evaluation``
"""

MATH_VERIFY_LOGGERS = ("math_verify", "math_verify.parser", "math_verify.grader")


def quiet_math_verify() -> None:
    """Silence math-verify's one-off 'Timeout is disabled ...' notice: benchfill bounds grading time itself, and
    the notice reached library users' output on every first grade off the main thread. (Here, not in grading: the
    CLI calls it before every command, and importing grading costs ~0.15 s of a 2 s diagnose.)"""
    import logging

    for name in MATH_VERIFY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
