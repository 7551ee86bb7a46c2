"""A successful job's answer, as its end event says it (``AnswerPayload``), built here for every
path: a reduce job's finish unit (``worker.final_checks``), a precision job's
(``worker.finishing``) and an interactive job's last answer (``api.interactive``)."""

from __future__ import annotations

from engine.workspace import Workspace
from persistence.events import AnswerPayload
from reducer_core.records import ReductionResult

MAX_LABELS = 50  # the min-bad model's node labels the event names (the artifact has them all)


def answer_payload(workspace: Workspace, result: ReductionResult) -> AnswerPayload:
    """The min-bad model's node labels (the first ``MAX_LABELS``) and, when the search localised
    the failure first, how (``localization``)."""
    labels = [workspace.index.label(n) for n in sorted(result.min_bad.nodes)][:MAX_LABELS]
    answer: AnswerPayload = {"min_bad_nodes": labels}
    if result.localization is not None:
        answer["localization"] = result.localization.to_json()
    return answer
