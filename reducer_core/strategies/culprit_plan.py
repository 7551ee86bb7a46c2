"""A round of checks planned from a single-culprit model: the strategy's sure checks, its next
check, and *level probes* that learn the verdicts of its checks after that in one round.

While every verdict so far fits a single culprit among ``support``, each possible culprit
determines the strategy's whole future: a candidate reproduces exactly when it holds the culprit.
The futures form a tree whose branches split the support. Walking it:

- the *sure line*: candidates whose verdict every possible culprit agrees on are needed and their
  verdicts are known in advance: they all go in this round, one slot each, no round of waiting;
- the *next check*: the first candidate whose verdict splits the support (needed, uncertain);
- below it, level ``d`` of the tree holds one uncertain candidate per branch. The *level probe*
  ``d`` is the union, over those branches, of the possible culprits each candidate holds: it
  reproduces exactly when the strategy's own ``d``-th uncertain check will. So ``r`` spare slots
  learn ``r`` more levels of the search in one round (a binary tree would need ``2**r - 1``
  checks), and the next round's sure line holds those ``r`` candidates: a search that halves the
  culprits advances about ``(K + 1) / 2`` levels per round of ``K`` slots once it runs, instead of
  ``log2(K + 1)``.
- When everything left below the next check (every candidate of every branch to the end of the
  search) fits in the spare slots, those candidates go instead: the search ends this round.

Hypothetical futures are explored on copies of the strategy (``Strategy.fork``), never on the
strategy itself, and the strategy only consumes real verdicts: the answer stays the sequential one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from reducer_core.candidate import Candidate
from reducer_core.strategies.base import Observation, Strategy

Known = Callable[[Candidate], Observation | None]

FAILS: Observation = (True, False)
PASSES: Observation = (False, True)
MAX_BRANCHES = 32
"""The widest level of the tree explored (levels double: 32 branches, 5 levels deep). Each branch
costs a fork, which replays the strategy's verdicts: on a 10,000-node chain a round's plan for 8
slots takes about 0.25 s with 32 (1.6 s with 256, for 2.0 rounds on average instead of 2.07 on the
200-node chain)."""
FINISH = 0.1
"""The likeliest candidates go instead of level probes when they end the search this round for at
least this share of the possible culprits (probes never end it: they only prepare the next round)."""


@dataclass
class Plan:
    """What to check this round, in order, with the chance that each is needed (1.0: sure);
    ``busy``: fingerprints being checked already (planned, but they take no slot)."""

    busy: Collection[str]
    picks: list[tuple[Candidate, float]] = field(default_factory=list)

    def add(self, candidate: Candidate, chance: float) -> None:
        self.picks.append((candidate, chance))

    @property
    def slots_taken(self) -> int:
        return sum(1 for candidate, _ in self.picks if candidate.fingerprint not in self.busy)

    def free(self, candidates: list[tuple[Candidate, float]]) -> int:
        return sum(1 for candidate, _ in candidates if candidate.fingerprint not in self.busy)


@dataclass
class _Branch:
    """A future: the strategy's position, the culprits that lead there, the unknown candidates met
    on the way (after the next check)."""

    position: Strategy
    support: frozenset[int]
    path: frozenset[str] = frozenset()


@dataclass
class _Tree:
    """What ``_explore`` saw below the next check: every unknown candidate met, first met first
    (with the share of culprits whose future meets it), the level probes, and the futures that
    ended (their share of culprits, the unknown candidates on their way)."""

    met: dict[str, tuple[Candidate, float]] = field(default_factory=dict)
    probes: list[frozenset[int]] = field(default_factory=list)
    ended: list[tuple[float, frozenset[str]]] = field(default_factory=list)

    def meet(self, candidate: Candidate, share: float) -> None:
        _, before = self.met.get(candidate.fingerprint, (candidate, 0.0))
        self.met[candidate.fingerprint] = (candidate, before + share)

    def likeliest(self, count: int, busy: Collection[str]) -> list[tuple[Candidate, float]]:
        """The ``count`` candidates (besides ``busy`` ones) most culprits' futures meet."""
        ranked = sorted(self.met.values(), key=lambda item: -item[1])
        return [item for item in ranked if item[0].fingerprint not in busy][:count]

    def finishes(self, picks: list[tuple[Candidate, float]], busy: Collection[str]) -> float:
        """The share of culprits whose whole future is checked with ``picks`` (and ``busy``)."""
        covered = {candidate.fingerprint for candidate, _ in picks} | set(busy)
        return sum(share for share, path in self.ended if path <= covered)


def plan_round(strategy: Strategy, known: Known, busy: Collection[str], support: frozenset[int], slots: int) -> Plan:
    """Candidates for this round that take up to ``slots`` slots (those in ``busy`` take none),
    under the single-culprit model with ``support`` the possible culprits."""
    plan = Plan(busy)
    position = strategy.fork()
    uncertain = _follow_sure_line(position, known, support, plan, slots)
    if uncertain is None or plan.slots_taken >= slots:
        return plan
    plan.add(uncertain, 1.0)
    spare = slots - plan.slots_taken
    if spare <= 0:
        return plan
    inside = support & uncertain.nodes
    failing = position.fork([FAILS])
    position.observe(uncertain, *PASSES)
    tree = _explore([_Branch(failing, inside), _Branch(position, support - inside)], known, len(support), spare)
    likeliest = tree.likeliest(spare, busy)
    if tree.finishes(likeliest, busy) >= FINISH:
        plan.picks += likeliest
    else:
        plan.picks += [(strategy.space.candidate(nodes), 0.0) for nodes in tree.probes[:spare]]
    return plan


def _follow_sure_line(
    position: Strategy, known: Known, support: frozenset[int], plan: Plan, slots: int
) -> Candidate | None:
    """Advance ``position`` through known verdicts and verdicts every possible culprit agrees on
    (those candidates go in ``plan``, sure to be needed); the first uncertain candidate, or None
    at the end of the search (or once ``slots`` are planned)."""
    while (candidate := position.propose()) is not None and plan.slots_taken < slots:
        outcome = known(candidate)
        if outcome is None:
            inside = support & candidate.nodes
            if inside and inside != support:
                return candidate
            plan.add(candidate, 1.0)
            outcome = FAILS if inside else PASSES
        position.observe(candidate, *outcome)
    return None


def _explore(branches: list[_Branch], known: Known, total: int, spare: int) -> _Tree:
    """Breadth-first over the futures below the next check, one uncertain candidate per future and
    level, while a level probe is still wanted or a future could still end within ``spare`` checks."""
    tree = _Tree()
    while branches and len(branches) <= MAX_BRANCHES:
        if len(tree.probes) >= spare and all(len(branch.path) > spare for branch in branches):
            break
        level: list[_Branch] = []
        probe: set[int] = set()
        for branch in branches:
            share = len(branch.support) / total
            candidate = _next_uncertain(branch, known, tree, share)
            if candidate is None:
                tree.ended.append((share, branch.path))
                continue
            tree.meet(candidate, share)
            path = branch.path | {candidate.fingerprint}
            inside = branch.support & candidate.nodes
            probe |= inside
            level.append(_Branch(branch.position.fork([FAILS]), inside, path))
            branch.position.observe(candidate, *PASSES)
            level.append(_Branch(branch.position, branch.support - inside, path))
        if probe:
            tree.probes.append(frozenset(probe))
        branches = level
    return tree


def _next_uncertain(branch: _Branch, known: Known, tree: _Tree, share: float) -> Candidate | None:
    """Follow ``branch`` through known and agreed verdicts (the agreed candidates are met, and
    join its path) to its next uncertain candidate, or None at its end."""
    position, support = branch.position, branch.support
    while (candidate := position.propose()) is not None:
        outcome = known(candidate)
        if outcome is None:
            inside = support & candidate.nodes
            if inside and inside != support:
                return candidate
            tree.meet(candidate, share)
            branch.path = branch.path | {candidate.fingerprint}
            outcome = FAILS if inside else PASSES
        position.observe(candidate, *outcome)
    return None
