"""Fails when a node of the given op type is present: ``op_present.py MODEL --op Sigmoid``."""

import argparse

from _common import finish, graph_nodes

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--op", required=True)
args = parser.parse_args()
nodes = graph_nodes(args.model)
hits = [name for name, op in nodes if op == args.op]
finish("op_present", bool(hits), len(nodes), f"op {args.op} present in {hits[:3]}")
