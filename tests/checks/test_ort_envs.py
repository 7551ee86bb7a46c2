"""The test helper that builds a venv per onnxruntime release (tests/ort_envs.py): what a build cut
short left is never reused (a venv whose ensurepip never ran failed every later run's pip, so the
release tests skipped for ever), and a failed build leaves nothing behind. No network: pip is told
to use no index (PIP_NO_INDEX), so the install fails at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.ort_envs import EnvUnavailableError, env_python


def test_a_half_built_env_is_built_again_and_a_failed_build_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "ort-1.30.0"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)  # cut short
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(EnvUnavailableError, match=r"pip install onnxruntime==1\.30\.0 failed") as raised:
        env_python("1.30.0", tmp_path)
    assert "No module named pip" not in str(raised.value)  # a fresh venv's pip ran, and found no index
    assert not folder.exists()
