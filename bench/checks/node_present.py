"""Fails when the named node(s) are all present: ``node_present.py MODEL --node A [B ...]``.

With one name this is "one specific node"; with two it is "two interacting nodes needed together"
(neither alone reproduces the failure)."""

import argparse

from _common import finish, graph_nodes

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--node", nargs="+", required=True)
args = parser.parse_args()
nodes = graph_nodes(args.model)
names = {name for name, _ in nodes}
finish("node_present", all(n in names for n in args.node), len(nodes), f"nodes {args.node} present")
