"""Property tests on random DAGs (hypothesis): whatever the wiring and the oracle, the result still
fails, is never larger than the start, and ``minimize``/``auto`` results are 1-minimal."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from reducer_core.flakiness import CONFIRM_LIMIT, MAX_PROBES, PROBE_BUDGET
from reducer_core.graph import GraphIndex
from reducer_core.strategies import MODES, SearchSpace
from tests.models import index_of, make_model, names_in, reduce_with

UNARY = ("Relu", "Neg", "Sigmoid")
BINARY = ("Add", "Mul")
INPUTS = ("x0", "x1")

PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class RandomDag:
    model: onnx.ModelProto
    names: tuple[str, ...]


@st.composite
def random_dags(draw: st.DrawFn) -> RandomDag:
    count = draw(st.integers(min_value=3, max_value=25))
    tensors = list(INPUTS)
    nodes = []
    for i in range(count):
        op = draw(st.sampled_from(UNARY + BINARY))
        arity = 2 if op in BINARY else 1
        # Bias towards recent tensors so that graphs get long paths as well as side branches.
        picks = [draw(st.integers(min_value=0, max_value=len(tensors) - 1)) for _ in range(arity)]
        if draw(st.booleans()):
            picks[0] = len(tensors) - 1
        name = f"N{i:02d}"
        nodes.append(helper.make_node(op, [tensors[p] for p in picks], [f"t{i:02d}"], name=name))
        tensors.append(f"t{i:02d}")
    read = {name for node in nodes for name in node.input}
    outputs = [t for t in tensors[len(INPUTS) :] if t not in read]
    extra = draw(st.lists(st.sampled_from(tensors[len(INPUTS) :]), max_size=2))
    outputs += [t for t in dict.fromkeys(extra) if t not in outputs]
    used_inputs = [x for x in INPUTS if x in read]
    model = make_model(nodes, used_inputs, outputs)
    return RandomDag(model, tuple(n.name for n in nodes))


Oracle = Callable[[set[str]], bool]


@st.composite
def dag_and_culprits(draw: st.DrawFn) -> tuple[RandomDag, frozenset[str]]:
    dag = draw(random_dags())
    culprits = draw(st.sets(st.sampled_from(dag.names), min_size=1, max_size=3))
    return dag, frozenset(culprits)


def monotone(culprits: frozenset[str]) -> Oracle:
    return lambda present: culprits <= present


def non_monotone(culprits: frozenset[str], full: frozenset[str], salt: int) -> Oracle:
    """Fails on the full model; elsewhere only when the culprits are present *and* a salted hash
    of the set says so: removing a node can bring the failure back (not monotone)."""

    def fails(present: set[str]) -> bool:
        if present == full:
            return True
        digest = hashlib.sha256(f"{salt}|{','.join(sorted(present))}".encode()).digest()
        return culprits <= present and digest[0] % 3 != 0

    return fails


def assert_one_minimal(index: GraphIndex, nodes: frozenset[int], fails: Oracle) -> None:
    space = SearchSpace(index, index.all_nodes())
    for node in nodes:
        removed = space.dead_after_removing(nodes, frozenset({node}))
        rest = space.candidate(nodes - removed).nodes
        if rest:
            assert not fails(names_in(index, rest)), f"removing {index.label(node)} still fails"


def check_properties(index: GraphIndex, fails: Oracle, mode: str, is_monotone: bool = False) -> frozenset[int]:
    result, checker, _ = reduce_with(index, fails, mode)
    best = result.min_bad.nodes
    assert best, "the result is never empty"
    assert fails(names_in(index, best)), "the result still fails"
    assert len(best) <= len(index.nodes)
    assert best <= index.all_nodes()
    fingerprints = [c.fingerprint for c in checker.seen]
    # A deterministic check has a candidate checked twice only when a verdict looked inconsistent
    # (a candidate passed although it contains a failing one: not monotone, or flaky) and was
    # probed, at most PROBE_BUDGET x MAX_PROBES times, or when an answer of 2-3 nodes was confirmed
    # (at most CONFIRM_LIMIT re-checks); the re-checks repeat exactly, so: not flaky.
    probes = [r for r in result.iterations if r.phase == "flaky-probe" and not r.cached]
    confirms = [r for r in result.iterations if r.phase == "flaky-confirm" and not r.cached]
    assert len(fingerprints) - len(set(fingerprints)) == len(probes) + len(confirms)
    assert len(probes) <= PROBE_BUDGET * MAX_PROBES and len(confirms) <= CONFIRM_LIMIT
    assert not confirms or 2 <= len(best) <= CONFIRM_LIMIT  # a one-node answer pays nothing
    assert result.flakiness is None or not result.flakiness.flaky
    if is_monotone:  # nothing is ever inconsistent: no candidate is checked twice but to confirm
        assert result.flakiness is None and not probes
    if mode in ("minimize", "auto"):
        assert_one_minimal(index, best, fails)
    return best


@PROPERTY_SETTINGS
@given(case=dag_and_culprits(), mode=st.sampled_from(MODES))
def test_monotone_oracle(case: tuple[RandomDag, frozenset[str]], mode: str) -> None:
    dag, culprits = case
    index = index_of(dag.model, shape_inference=False)
    best = check_properties(index, monotone(culprits), mode, is_monotone=True)
    if mode in ("minimize", "auto"):
        # With a monotone oracle, 1-minimal means: the culprits plus nothing that can go.
        assert culprits <= names_in(index, best)
    if len(culprits) == 1:
        # One failing node is isolated to exactly that node, in every mode.
        assert names_in(index, best) == set(culprits)


@PROPERTY_SETTINGS
@given(case=dag_and_culprits(), mode=st.sampled_from(MODES), salt=st.integers(0, 2**16))
def test_non_monotone_oracle(case: tuple[RandomDag, frozenset[str]], mode: str, salt: int) -> None:
    dag, culprits = case
    index = index_of(dag.model, shape_inference=False)
    check_properties(index, non_monotone(culprits, frozenset(dag.names), salt), mode)


@PROPERTY_SETTINGS
@given(dag=random_dags(), mode=st.sampled_from(MODES), op=st.sampled_from(UNARY + BINARY))
def test_op_type_oracle(dag: RandomDag, mode: str, op: str) -> None:
    """Polygraphy's classic: the failure is an op type; the result is one node of that type."""
    index = index_of(dag.model, shape_inference=False)
    ops = {node.name: node.op_type for node in index.nodes}
    if op not in ops.values():
        return

    def fails(present: set[str]) -> bool:
        return any(ops[name] == op for name in present)

    best = check_properties(index, fails, mode)
    assert [index.nodes[n].op_type for n in best] == [op]


@PROPERTY_SETTINGS
@given(case=dag_and_culprits(), mode=st.sampled_from(MODES), keep=st.sampled_from(["inputs", "outputs"]))
def test_constraints_hold_on_random_dags(case: tuple[RandomDag, frozenset[str]], mode: str, keep: str) -> None:
    """--no-reduce-inputs keeps results closed upwards, --no-reduce-outputs closed downwards; a
    single culprit ends as exactly its cone, and several culprits never lose one."""
    dag, culprits = case
    index = index_of(dag.model, shape_inference=False)
    fails = monotone(culprits)
    result, checker, _ = reduce_with(
        index, fails, mode, reduce_inputs=keep != "inputs", reduce_outputs=keep != "outputs"
    )
    best = result.min_bad.nodes
    assert fails(names_in(index, best))
    edges = index.preds if keep == "inputs" else index.succs
    for candidate in [result.min_bad, *checker.seen]:
        for n in candidate.nodes:
            assert edges[n] <= candidate.nodes, "a proposed candidate breaks the constraint"
    culprit_ids = [i for i, node in enumerate(index.nodes) if node.name in culprits]
    closure = index.ancestors if keep == "inputs" else index.descendants
    cone = closure(culprit_ids, index.all_nodes())
    if len(culprits) == 1 or mode in ("minimize", "auto"):
        assert best == cone


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=dag_and_culprits(), mode=st.sampled_from(MODES))
def test_every_candidate_of_a_random_dag_is_a_valid_model(case: tuple[RandomDag, frozenset[str]], mode: str) -> None:
    import onnxruntime as ort

    from reducer_core.extract import extract
    from tests.models import random_feeds

    dag, culprits = case
    index = index_of(dag.model)
    _, checker, _ = reduce_with(index, monotone(culprits), mode)
    for candidate in checker.seen:
        model = extract(index, candidate)
        onnx.checker.check_model(model, full_check=True)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        session.run(None, random_feeds(model))


@PROPERTY_SETTINGS
@given(
    case=dag_and_culprits(),
    mode=st.sampled_from(MODES),
    salt=st.integers(0, 2**16),
    steps=st.integers(0, 40),
)
def test_state_round_trip_on_random_dags(
    case: tuple[RandomDag, frozenset[str]], mode: str, salt: int, steps: int
) -> None:
    """Stopped after any number of verdicts, from_state() rebuilds the same position (next
    proposal, best so far) from JSON, without asking the oracle anything."""
    import json

    from reducer_core.strategies import Strategy

    dag, culprits = case
    index = index_of(dag.model, shape_inference=False)
    fails = non_monotone(culprits, frozenset(dag.names), salt)
    space = SearchSpace(index, index.all_nodes())
    strategy = Strategy(space, mode)
    for _ in range(steps):
        candidate = strategy.propose()
        if candidate is None:
            break
        strategy.observe(candidate, fails(names_in(index, candidate)))
    resumed = Strategy.from_state(space, json.loads(json.dumps(strategy.state())))
    assert resumed.propose() == strategy.propose()
    assert resumed.best_bad == strategy.best_bad
    assert resumed.best_good == strategy.best_good
    assert resumed.done == strategy.done
