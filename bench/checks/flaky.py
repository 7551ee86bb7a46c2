"""Flaky failure: when the culprit node is present, fails with probability ``--p`` only.

The coin is seeded by the candidate itself (sha256 of ``--salt`` and the sorted node names), so
the same node set gets the same answer from both reducers and on a re-run, while different node
sets containing the culprit disagree now and then, as a flaky TensorRT build would."""

import argparse
import hashlib
import random

from _common import finish, graph_nodes


def coin(salt: str, names: list[str]) -> float:
    digest = hashlib.sha256("\n".join([salt, *sorted(names)]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big")).random()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--node", required=True)
    parser.add_argument("--p", type=float, default=0.7)
    parser.add_argument("--salt", default="0")
    args = parser.parse_args()
    nodes = graph_nodes(args.model)
    names = [name for name, _ in nodes]
    failed = args.node in names and coin(args.salt, names) < args.p
    finish("flaky", failed, len(nodes), f"{args.node} present and the coin said fail")
