"""The session's step machine (``reducer_core.machine``): requests, delivery in any order, the
localisation flow, the min-good probe and resuming from JSON state (pure: no files, no checks)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from reducer_core.cache import VerdictCache
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.errors import CheckInfraError, ReplayMismatchError
from reducer_core.graph import GraphIndex
from reducer_core.localization import LayerwiseResult, min_good_probes
from reducer_core.machine import ReductionMachine
from reducer_core.records import IterationRecord, Localization
from reducer_core.requests import CheckRequest, LayerwiseRequest, Request
from reducer_core.strategies import MODES, SearchSpace
from reducer_core.verdict import Verdict, VerdictKind
from tests.models import FAIL, PASS, branchy_model, index_of, names_in

OVERFLOW = Verdict(VerdictKind.FAIL, "mismatch:nonfinite")
LOCALIZING = SessionConfig(localize=True, min_good=True)


@pytest.fixture(scope="module")
def branchy() -> GraphIndex:
    return index_of(branchy_model())


def _node(index: GraphIndex, name: str) -> int:
    return next(i for i, node in enumerate(index.nodes) if node.name == name)


def _tensor_of(index: GraphIndex, name: str) -> str:
    return index.writes[_node(index, name)][0]


class Log:
    """A listener that keeps what it heard."""

    def __init__(self) -> None:
        self.records: list[IterationRecord] = []
        self.localizations: list[Localization] = []
        self.layerwise: list[LayerwiseResult] = []

    def on_record(self, record: IterationRecord) -> None:
        self.records.append(record)

    def on_layerwise(self, result: LayerwiseResult) -> None:
        self.layerwise.append(result)

    def on_localization(self, localization: Localization) -> None:
        self.localizations.append(localization)


Answerer = Callable[[Request], Verdict | LayerwiseResult]


def answers(index: GraphIndex, fails: set[str], layerwise: list[tuple[str, str]] | None = None) -> Answerer:
    """Fail (like an overflow) when every node of ``fails`` is present; the layerwise run reports
    ``layerwise`` as its mismatches."""

    def answer(request: Request) -> Verdict | LayerwiseResult:
        if isinstance(request, LayerwiseRequest):
            return LayerwiseResult(FAIL, tuple(layerwise or ()))
        return OVERFLOW if fails <= names_in(index, request.candidate) else PASS

    return answer


def run(machine: ReductionMachine, answer: Answerer, limit: int | None = None) -> list[Request]:
    """Deliver answers one request at a time (at most ``limit``); the requests, in order."""
    seen: list[Request] = []
    while not machine.done and (limit is None or len(seen) < limit):
        (request,) = machine.next_requests(1)
        seen.append(request)
        machine.deliver(request, answer(request))
    return seen


def fresh(index: GraphIndex, config: SessionConfig, log: Log | None = None) -> ReductionMachine:
    return ReductionMachine(index, config, VerdictCache(index.fingerprint, "check"), log)


def resumed(index: GraphIndex, config: SessionConfig, state: dict[str, object]) -> ReductionMachine:
    saved = json.loads(json.dumps(state))
    return ReductionMachine.from_state(index, config, VerdictCache(index.fingerprint, "check"), saved)


def test_next_requests_repeats_the_pending_request_until_it_is_delivered(branchy: GraphIndex) -> None:
    machine = fresh(branchy, SessionConfig())
    first = machine.next_requests(1)
    assert first == machine.next_requests(1)
    assert machine.next_requests(3)[:1] == first  # more slots: the pending request first, then speculation
    (request,) = first
    assert isinstance(request, CheckRequest) and request.phase == "original" and request.number == 1
    assert request.id == f"check:{request.candidate.fingerprint}:0"
    assert machine.next_requests(0) == []
    machine.deliver(request, FAIL)
    (second,) = machine.next_requests(1)
    assert second.id != request.id and isinstance(second, CheckRequest) and not second.speculative


@pytest.mark.parametrize("mode", MODES)
def test_a_session_resumed_from_json_state_at_any_point_ends_like_one_run(branchy: GraphIndex, mode: str) -> None:
    config = SessionConfig(mode=mode, min_good=True)
    answer = answers(branchy, {"C", "H"})
    whole = fresh(branchy, config)
    sequence = [r.id for r in run(whole, answer)]
    for stop in range(1, len(sequence)):
        first = fresh(branchy, config)
        done_before = [r.id for r in run(first, answer, limit=stop)]
        second = resumed(branchy, config, first.state())
        rest = [r.id for r in run(second, answer)]
        assert done_before + rest == sequence, stop
        assert second.result.min_bad == whole.result.min_bad
        assert second.result.min_good == whole.result.min_good
        assert second.checks_run == whole.checks_run
        assert second.result.iterations == second.records  # records of this process only


def test_a_resumed_session_continues_the_iteration_numbers(branchy: GraphIndex) -> None:
    first = fresh(branchy, SessionConfig())
    run(first, answers(branchy, {"D"}), limit=3)
    (request,) = resumed(branchy, SessionConfig(), first.state()).next_requests(1)
    assert isinstance(request, CheckRequest) and request.number == 4


def test_the_state_of_another_model_or_other_options_is_refused(branchy: GraphIndex) -> None:
    machine = fresh(branchy, SessionConfig(mode="bisect"))
    run(machine, answers(branchy, {"D"}), limit=2)
    with pytest.raises(ReplayMismatchError, match="other options"):
        resumed(branchy, SessionConfig(mode="auto"), machine.state())
    other = index_of(branchy_model(prefix="x"))
    with pytest.raises(ReplayMismatchError, match="different model"):
        resumed(other, SessionConfig(mode="bisect"), machine.state())


def test_a_state_with_only_a_verdict_cache_resumes_without_rerunning_its_checks(branchy: GraphIndex) -> None:
    """What the service stored before sessions existed: the verdict cache alone."""
    answer = answers(branchy, {"E"})
    whole = fresh(branchy, SessionConfig())
    sequence = [r.id for r in run(whole, answer)]
    partial = fresh(branchy, SessionConfig())
    run(partial, answer, limit=3)
    legacy = resumed(branchy, SessionConfig(), {"cache": partial.cache.to_json()})
    assert [r.id for r in run(legacy, answer)] == sequence[3:]


def test_a_verdict_delivered_before_it_is_needed_is_used_without_a_request(branchy: GraphIndex) -> None:
    """Results may arrive in any order: one for a candidate no step asked for yet is cached and
    answers that step when the flow gets there (no request for it)."""
    answer = answers(branchy, {"D"})
    sequence = run(fresh(branchy, SessionConfig(mode="linear")), answer)
    ahead = sequence[-1]
    assert isinstance(ahead, CheckRequest)
    machine = fresh(branchy, SessionConfig(mode="linear"))
    machine.deliver(ahead, answer(ahead))  # before anything else
    rest = run(machine, answer)
    assert [r.id for r in rest] == [r.id for r in sequence[:-1]]
    assert names_in(branchy, machine.result.min_bad) == {"D"}
    assert machine.checks_run == len(sequence)


def test_an_infrastructure_error_is_asked_again_with_a_new_request_id(branchy: GraphIndex) -> None:
    machine = fresh(branchy, SessionConfig(infra_retries=1))
    (original,) = machine.next_requests(1)
    broken = Verdict(VerdictKind.INFRA_ERROR, "", "GPU lost")
    machine.deliver(original, broken)
    (again,) = machine.next_requests(1)
    assert isinstance(again, CheckRequest) and again.attempt == 1 and again.id != original.id
    assert again.candidate == original.candidate and again.number == 2
    machine.deliver(original, broken)  # a late duplicate of the first attempt's answer changes nothing
    assert machine.next_requests(1) == [again]
    with pytest.raises(CheckInfraError, match="could not run on the original model: GPU lost"):
        machine.deliver(again, broken)
    assert len(machine.cache) == 0


def test_localisation_settles_in_three_checks_and_probes_the_producers_for_min_good(branchy: GraphIndex) -> None:
    """C's output is the first mismatch; C alone reproduces; its producers A and B pass."""
    log = Log()
    machine = fresh(branchy, LOCALIZING, log)
    tensor = _tensor_of(branchy, "C")
    answer = answers(branchy, {"C"}, [("tolerance", "other"), ("nonfinite", tensor)])
    requests = run(machine, answer)
    phases = [r.phase if isinstance(r, CheckRequest) else r.kind for r in requests]
    assert phases == ["original", "layerwise", "localize", "min-good"]
    result = machine.result
    assert names_in(branchy, result.min_bad) == {"C"}
    assert result.min_good is not None and names_in(branchy, result.min_good) == {"A", "B"}
    assert result.checks_run == 4
    assert result.localization is not None and result.localization.path == "layerwise"
    assert result.localization.tensor == tensor  # the mismatch of the original's kind, not the first
    assert log.localizations == [result.localization]
    assert [r.phase for r in log.records] == ["original", "localize", "min-good"]
    assert log.layerwise and machine.state()["layerwise"] is not None


def test_the_min_good_probe_tries_the_consumers_when_the_producers_fail_too(branchy: GraphIndex) -> None:
    """B's output (read by C and E) mismatches and B alone reproduces; B has no producer (it reads
    a graph input), so the consumers C and E are the probe; with them failing too, the nodes before
    the first mismatch (A); with A failing as well there is none."""
    tensor = _tensor_of(branchy, "B")
    machine = fresh(branchy, LOCALIZING)
    run(machine, answers(branchy, {"B"}, [("nonfinite", tensor)]))
    assert names_in(branchy, machine.result.min_good or Candidate(frozenset())) == {"C", "E"}

    def failing_alone(*names: str) -> Answerer:
        def answer(request: Request) -> Verdict | LayerwiseResult:
            if isinstance(request, CheckRequest) and names_in(branchy, request.candidate) & set(names):
                return OVERFLOW
            return answers(branchy, {"B"}, [("nonfinite", tensor)])(request)

        return answer

    before = fresh(branchy, LOCALIZING)
    run(before, failing_alone("E"))
    assert names_in(branchy, before.result.min_good or Candidate(frozenset())) == {"A"}
    failing = fresh(branchy, LOCALIZING)
    run(failing, failing_alone("E", "A"))
    assert failing.result.min_good is None
    probes = [names_in(branchy, r.candidate) for r in failing.records if r.phase == "min-good"]
    assert probes == [{"C", "E"}, {"A"}]  # B has no producer


def test_a_localised_run_whose_neighbours_fail_too_offers_the_nodes_before_the_first_mismatch(
    branchy: GraphIndex,
) -> None:
    """Like a real export: H's output overflows and H alone reproduces; its producers E and G fail
    alone too (E's output is off by more than the tolerance: the layerwise run's first mismatch) and
    its reader F gets the overflowing tensor. The probe then takes every node before E (the index's
    topological order: A, B, G, C, E, D, H, F), which the layerwise run found in tolerance: A, B, G,
    C, and it passes."""
    layerwise = [("tolerance", _tensor_of(branchy, "E")), ("nonfinite", _tensor_of(branchy, "H"))]
    lossy = Verdict(VerdictKind.FAIL, "mismatch:tolerance")

    def answer(request: Request) -> Verdict | LayerwiseResult:
        if isinstance(request, LayerwiseRequest):
            return LayerwiseResult(FAIL, tuple(layerwise))
        present = names_in(branchy, request.candidate)
        if present & {"H", "F"}:
            return OVERFLOW
        return lossy if "E" in present else PASS

    whole = fresh(branchy, LOCALIZING)
    sequence = run(whole, answer)
    probes = [r for r in whole.records if r.phase == "min-good"]
    assert [names_in(branchy, r.candidate) for r in probes] == [{"E", "G"}, {"F"}, {"A", "B", "G", "C"}]
    assert [r.verdict for r in probes] == [lossy, OVERFLOW, PASS]
    result = whole.result
    assert names_in(branchy, result.min_bad) == {"H"} and result.localization is not None
    assert result.localization.path == "layerwise"
    assert result.min_good is not None and names_in(branchy, result.min_good) == {"A", "B", "G", "C"}
    assert result.checks_run == 6  # original, layerwise run, H alone, three probes
    for stop in range(1, len(sequence)):  # the probes replay from the state like the rest
        first = fresh(branchy, LOCALIZING)
        run(first, answer, limit=stop)
        second = resumed(branchy, LOCALIZING, json.loads(json.dumps(first.state())))
        run(second, answer)
        assert second.result.min_good == result.min_good and second.checks_run == result.checks_run


def test_without_a_layerwise_run_the_probe_has_no_nodes_before_a_mismatch(branchy: GraphIndex) -> None:
    space = SearchSpace(branchy, branchy.all_nodes())
    h = Candidate(frozenset({_node(branchy, "H")}))
    assert [names_in(branchy, c) for c in min_good_probes(space, h)] == [{"E", "G"}, {"F"}]
    nothing = LayerwiseResult(FAIL, (("nonfinite", "x0"),))  # a graph input: no producer, no prefix
    assert [names_in(branchy, c) for c in min_good_probes(space, h, nothing)] == [{"E", "G"}, {"F"}]
    kept = SearchSpace(branchy, branchy.all_nodes(), reduce_outputs=False)  # the prefix closed downwards
    first = LayerwiseResult(FAIL, (("tolerance", _tensor_of(branchy, "E")),))
    assert all(not c.nodes & h.nodes for c in min_good_probes(kept, h, first))


def test_a_suspect_that_does_not_reproduce_falls_back_to_reduction(branchy: GraphIndex) -> None:
    log = Log()
    machine = fresh(branchy, LOCALIZING, log)
    run(machine, answers(branchy, {"H", "F"}, [("nonfinite", _tensor_of(branchy, "H"))]))
    result = machine.result
    assert names_in(branchy, result.min_bad) == {"H", "F"}
    assert result.localization is not None and result.localization.path == "reduction"
    assert result.localization.checks == 2
    assert "alone does not reproduce" in result.localization.reason
    phases = [r.phase for r in log.records]
    assert phases[:2] == ["original", "localize"] and len(phases) > 3
    assert result.min_good is not None  # the strategy saw passing candidates: no probe needed
    assert "min-good" not in phases


@pytest.mark.parametrize(
    ("layerwise", "reason"),
    [
        (LayerwiseResult(Verdict(VerdictKind.CRASH, "signal=SIGSEGV")), "layerwise run gave crash"),
        (LayerwiseResult(PASS), "no tensor beyond tolerance"),
        (LayerwiseResult(FAIL, (("nonfinite", "x0"),)), "has no producer node"),
    ],
)
def test_a_layerwise_run_without_a_suspect_falls_back_at_once(
    branchy: GraphIndex, layerwise: LayerwiseResult, reason: str
) -> None:
    machine = fresh(branchy, LOCALIZING)
    (original,) = machine.next_requests(1)
    machine.deliver(original, OVERFLOW)
    (request,) = machine.next_requests(1)
    assert isinstance(request, LayerwiseRequest)
    machine.deliver(request, layerwise)
    assert machine.localization is not None and reason in machine.localization.reason
    assert machine.localization.checks == 1
    (next_request,) = machine.next_requests(1)
    assert isinstance(next_request, CheckRequest) and next_request.phase not in ("localize", "original")


def test_a_layerwise_result_keeps_only_the_first_mismatch_of_each_kind() -> None:
    result = LayerwiseResult(FAIL, (("tolerance", "a"), ("tolerance", "b"), ("nonfinite", "c"), ("nonfinite", "d")))
    compact = result.compact()
    assert compact.mismatches == (("tolerance", "a"), ("nonfinite", "c"))
    assert LayerwiseResult.from_json(json.loads(json.dumps(compact.to_json()))) == compact


def test_resuming_after_the_layerwise_run_does_not_run_it_again(branchy: GraphIndex) -> None:
    answer = answers(branchy, {"C"}, [("nonfinite", _tensor_of(branchy, "C"))])
    first = fresh(branchy, LOCALIZING)
    run(first, answer, limit=2)  # the original and the layerwise run
    second = resumed(branchy, LOCALIZING, first.state())
    phases = [r.phase if isinstance(r, CheckRequest) else r.kind for r in run(second, answer)]
    assert phases == ["localize", "min-good"]
    assert second.result.checks_run == 4
    assert second.result.localization is not None and second.result.localization.path == "layerwise"


def test_a_skipped_flowchart_reports_why(branchy: GraphIndex) -> None:
    machine = fresh(branchy, SessionConfig(not_localized="--no-localize"))
    run(machine, answers(branchy, {"D"}))
    assert machine.result.localization == Localization("reduction", "--no-localize", 0)
