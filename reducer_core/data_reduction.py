"""Smaller inputs: once the graph is minimal, the sizes of the min-bad model's input dimensions
shrink to the smallest that still fail (``Candidate.data``, ``reducer_core.data_edits``). Opt-in
(``SessionConfig.reduce_data``, ``--reduce-data``).

The dimensions are grouped by size: every dimension of value V > 1 among the model's graph inputs
(initializers excluded) is one group, so inputs that share a sequence length or a batch shrink
together. Largest size first, each group is searched in turn, keeping what the groups before it
settled: the smallest size, 1, first (one check settles a failure at any size); when it passes,
halve while the model fails (V/2, V/4, ...); at the first pass, bisect between it and the last
failing size. With a monotone check the answer is the smallest failing size exactly, in at most
about 2 * log2(V) + 1 checks per group (a failure at every size: one). A size the model's nodes
cannot take (``DataEditError``: a MatMul's contraction dimension against its weight, a bias
broadcast, a Reshape to a fixed shape, a model that fails ``onnx.checker``'s full check such as a
Loop whose outputs lose their shapes) costs no check: it counts as a pass, and when half the size
is refused already the group is left alone (a weight's dimension, not a data one).

Sizes the user fixed never shrink (``SessionConfig.fixed_sizes``: those of ``--model-input-shapes``),
nor, when the check feeds values of its own (``SessionConfig.fixed_inputs``: samples, golden values),
any input's size: then only the weights' sizes that no input shares do.

Then the weights (``reducer_core.weight_edits``), with the input sizes settled: the same search
over the sizes of the weights' dimensions (``WeightSearch``: a hidden size shrinks with the weights
and the inputs that share it), and last one check of the model with every weight sliced to the
part its Gather/Slice readers take (``used_candidate``: exact, it costs a check like any step).

A smaller size counts as failing only with the original's failure (``reproduces``): at least its
family, even with ``--any-failure``, and never a command check whose runtime refused an input's
size (``INPUT_SIZE_REFUSED``: the check fed inputs of its own sizes) when the original's did not.

A step machine like the strategies (``propose``/``observe``/``best_bad``), deterministic (the
validity of a size is a function of the model), so the session replays it from the verdict cache.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace

import onnx

from reducer_core import data_edits, weight_edits
from reducer_core.candidate import Candidate
from reducer_core.extract import extract
from reducer_core.graph import GraphIndex
from reducer_core.verdict import Pinning, Verdict

PHASE = "data"
# The signature part of a command check's failure whose output shows that the runtime refused an
# input's size (``checks.command``): the check fed inputs of its own sizes to a smaller model.
INPUT_SIZE_REFUSED = "input-size-refused"


@dataclass
class _Group:
    size: int  # the original size
    passing: int = 0  # the largest size known not to fail (0: none yet)
    failing: int = 0  # the smallest size known to fail (the original size at first)
    halving: bool = True
    smallest: bool = True  # size 1 not tried yet: it comes first

    def next_size(self) -> int | None:
        if self.smallest:
            return 1 if self.failing > 1 else None
        if self.halving and self.failing // 2 > self.passing:
            return self.failing // 2
        middle = (self.passing + self.failing) // 2
        return middle if middle > self.passing else None


class DataSearch:
    """``valid(candidate)``: whether the candidate's nodes take its sizes (checked without a run)."""

    def __init__(
        self,
        base: Candidate,
        sizes: list[int],
        valid: Callable[[Candidate], bool],
        edit: Callable[[int, int], str] = data_edits.dim_edit,
    ) -> None:
        self.base = base
        self.valid = valid
        self.edit = edit  # the data edit of one size (``data_edits.dim_edit``, ``weight_edits.dim_edit``)
        self._groups = [_Group(size, 0, size) for size in sorted(set(sizes), reverse=True) if size > 1]
        self._settled: dict[int, int] = {}  # original size -> the smallest failing size found
        self._at = 0  # the group being searched
        self._asked: Candidate | None = None
        self._asked_size = 0
        self.checks = 0
        self.outcomes: list[bool] = []  # the verdicts observed, in order (``--jobs``: the budget of checks ahead)

    @classmethod
    def start(
        cls, index: GraphIndex, base: Candidate, keep: frozenset[int] = frozenset(), inputs_fixed: bool = False
    ) -> DataSearch | None:
        """A search over ``base``'s input sizes but those in ``keep``; None when it has none above 1
        (or ``inputs_fixed``, or it has data edits already, or a primary node: its frozen side-branch
        constants could not shrink with it)."""
        if inputs_fixed or base.data or base.primary is not None:  # frozen side branches keep their full sizes
            return None
        try:
            model = extract(index, base)
        except data_edits.DataEditError:
            return None
        sizes = [d for d in _input_sizes(model) if d not in keep]
        if not sizes:
            return None
        return cls(base, sizes, lambda candidate: _takes(index, candidate))

    def _candidate(self, sizes: dict[int, int]) -> Candidate:
        edits = frozenset(self.edit(old, new) for old, new in sizes.items() if old != new)
        return Candidate(self.base.nodes, self.base.primary, self.base.body, self.base.data | edits)

    def _with(self, group: _Group, size: int) -> Candidate:
        return self._candidate({**self._settled, group.size: size})

    def propose(self) -> Candidate | None:
        while self._at < len(self._groups):
            group = self._groups[self._at]
            size = group.next_size()
            if size is None:
                self._settled[group.size] = group.failing
                self._at += 1
                continue
            candidate = self._with(group, size)
            if self.valid(candidate):
                self._asked, self._asked_size = candidate, size
                return candidate
            if group.smallest:
                group.smallest, group.passing = False, 1  # refused: as a pass, without a check
                continue
            if group.halving and group.failing == group.size:
                self._at += 1  # half the size is refused already: a weight's dimension, left alone
                continue
            self._take(group, size, failed=False)
        self._asked = None
        return None

    def observe(self, candidate: Candidate, failed: bool) -> None:
        if candidate != self._asked or self._asked is None:
            raise ValueError("observe() was given a candidate that is not the pending proposal")
        group = self._groups[self._at]
        self._take(group, self._asked_size, failed)
        self.outcomes.append(failed)
        self._asked = None

    def copy(self) -> DataSearch:
        """An independent copy at the same position: the futures checked ahead are explored on
        copies (``reducer_core.data_ahead``), never on the search the flow runs."""
        twin = copy.copy(self)
        twin._groups = [replace(group) for group in self._groups]
        twin._settled = dict(self._settled)
        twin.outcomes = list(self.outcomes)
        return twin

    @staticmethod
    def _take(group: _Group, size: int, failed: bool) -> None:
        if group.smallest:  # size 1: a failure settles the group, a pass starts the halving
            group.smallest = False
            group.failing, group.passing = (size, group.passing) if failed else (group.failing, size)
            return
        if failed:
            group.failing = size
        else:
            group.passing, group.halving = size, False

    @property
    def done(self) -> bool:
        return self._at >= len(self._groups)

    @property
    def best_bad(self) -> Candidate:
        sizes = dict(self._settled)
        if self._at < len(self._groups):
            group = self._groups[self._at]
            sizes[group.size] = group.failing
        return self._candidate(sizes)


class WeightSearch(DataSearch):
    """The search over the sizes of the weights' dimensions (``weight_edits.dim_edit``), on top of
    the input sizes ``base`` settled."""

    @classmethod
    def start(
        cls, index: GraphIndex, base: Candidate, keep: frozenset[int] = frozenset(), inputs_fixed: bool = False
    ) -> DataSearch | None:
        """None when ``base``'s model has no weight dimension above 1 but those in ``keep`` (with
        ``inputs_fixed``, also none that an input shares), or has a primary node."""
        if base.primary is not None or any(weight_edits.is_weight_edit(e) for e in base.data):
            return None
        try:
            model = extract(index, base)
        except data_edits.DataEditError:
            return None
        keep = keep | frozenset(_input_sizes(model)) if inputs_fixed else keep
        sizes = [d for d in weight_edits.weight_sizes(model, index.read_weight) if d not in keep]
        if not sizes:
            return None
        return cls(base, sizes, lambda candidate: _takes(index, candidate), weight_edits.dim_edit)


def used_candidate(index: GraphIndex, base: Candidate) -> Candidate | None:
    """``base`` with every weight its readers take only part of sliced to that part
    (``weight_edits.used_edit``); None when there is none (or its nodes cannot take it)."""
    if base.primary is not None:
        return None
    try:
        names = weight_edits.used_candidates(extract(index, base), index.read_weight)
    except data_edits.DataEditError:
        return None
    if not names:
        return None
    candidate = Candidate(
        base.nodes, base.primary, base.body, base.data | {weight_edits.used_edit(name) for name in names}
    )
    return candidate if _takes(index, candidate) else None


def reproduces(verdict: Verdict, original: Verdict, pinned: bool | Pinning) -> bool:
    """Whether a data candidate's ``verdict`` is the ``original`` failure: under ``pinned``, but at
    least the failure's family (a smaller size that fails otherwise is no smaller reproduction), and
    not when a command check's runtime refused an input's size that the original's took."""
    if refused_input_size(verdict) and not refused_input_size(original):
        return False
    pinning = Pinning.of(pinned)
    return verdict.reproduces(original, Pinning.KIND if pinning is Pinning.OFF else pinning)


def refused_input_size(verdict: Verdict) -> bool:
    """Whether ``verdict`` is a command check's failure whose runtime refused an input's size."""
    return INPUT_SIZE_REFUSED in verdict.signature.split(";")


def _input_sizes(model: onnx.ModelProto) -> list[int]:
    return [d for dims in data_edits.input_dims(model).values() for d in dims if isinstance(d, int) and d > 1]


def _takes(index: GraphIndex, candidate: Candidate) -> bool:
    try:
        extract(index, candidate)
    except data_edits.DataEditError:
        return False
    return True


def input_sizes(index: GraphIndex, candidate: Candidate) -> dict[str, object] | None:
    """What the data edits of ``candidate`` changed (``--summary-json``'s ``smaller_inputs``): the
    sizes, the input elements and the weights' bytes before and after; None without data edits."""
    if not candidate.data:
        return None
    plain = extract(index, Candidate(candidate.nodes, candidate.primary, candidate.body))
    edited = extract(index, candidate)
    before, after = data_edits.input_dims(plain), data_edits.input_dims(edited)
    return {
        "sizes": data_edits.describe(candidate.data),
        "weights": weight_edits.describe(sorted(candidate.data)),
        "inputs_before": before,
        "inputs_after": after,
        "elements_before": data_edits.elements(before),
        "elements_after": data_edits.elements(after),
        "initializer_bytes_before": weight_edits.initializer_bytes(plain),
        "initializer_bytes_after": weight_edits.initializer_bytes(edited),
    }
