"""``onnx-reducer reduce --reduce-data --jobs 4``: the spare slots check the data step's next sizes
ahead (``reducer_core.data_ahead``); the answer is the one-slot answer, byte for byte."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli_data import _data_checks, _reduce, _seq_of_result


def test_sizes_checked_ahead_give_the_one_slot_answer(in_tmp: Path) -> None:
    one = _reduce(33, "--reduce-data", "--jobs", "1")
    sequential = Path("r.onnx").read_bytes()
    four = _reduce(33, "--reduce-data", "--jobs", "4")
    assert Path("r.onnx").read_bytes() == sequential
    assert _seq_of_result() == 33
    # a size checked ahead is recorded when its verdict comes ('ahead'), not again when the step uses
    # it; on a loaded machine the sizes ahead may come too late to be used, so the step never pays
    # more, and the fewer rounds are shown where timing plays no part (tests/core/test_data_ahead.py)
    assert _data_checks(four) <= _data_checks(one)
    assert four["speculative_checks"] != 0
