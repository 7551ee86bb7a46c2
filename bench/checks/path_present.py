"""Fails when node B is reachable from node A inside the model: ``path_present.py MODEL --from A
--to B``: a chain of nodes, each reading a tensor the previous one produced (a tensor that is a
graph input of the candidate is no edge, even when a node of the candidate also produces it).

"Fails when A reaches B" needs every node on some path between them, so the smallest failing
model holds a whole path: on a chain, everything between A and B (large answers)."""

import argparse

from _common import finish, graph_edges

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--from", dest="source", required=True)
parser.add_argument("--to", dest="target", required=True)
args = parser.parse_args()
nodes, graph_inputs = graph_edges(args.model)
producer = {out: name for name, _, outputs in nodes for out in outputs if out and out not in graph_inputs}
readers: dict[str, list[str]] = {}
for name, inputs, _ in nodes:
    for tensor in inputs:
        if tensor in producer:
            readers.setdefault(producer[tensor], []).append(name)
names = {name for name, _, _ in nodes}
seen, stack = {args.source}, [args.source] if args.source in names else []
while stack:
    for nxt in readers.get(stack.pop(), []):
        if nxt not in seen:
            seen.add(nxt)
            stack.append(nxt)
finish(
    "path_present",
    args.target in seen and args.target in names,
    len(nodes),
    f"{args.target} reached from {args.source}",
)
