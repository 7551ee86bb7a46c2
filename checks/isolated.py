"""Running a check in a fresh child process: its own interpreter (never a fork of this one), its
own process group, a private working directory and an allow-listed environment (``safe_child_env``),
killed (group and all) at the time limit.

A segfault in a runtime becomes a ``crash`` verdict and a hang a ``timeout`` verdict; the
reduction goes on. The child runs ``python -m checks.child PAYLOAD``; ``PAYLOAD`` names an entry
point (``module:function``) that takes the payload dict and returns a result dict
``{kind, signature, detail, output}``, which the child writes to ``PAYLOAD``'s ``result`` path."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checks.capture import BoundedText, StreamCapture, kill_group, pump, signal_name
from checks.command import KILL_GRACE_S, CommandCheck
from checks.lifeline import OWNER_ENV
from checks.spec import CheckSpec, ModelCheck
from checks.warm import ChildRun, reuse_folder, run_warm
from reducer_core.verdict import Verdict, VerdictKind

SPEC_ENTRY = "checks.kinds:run_spec"
_ROOT = str(Path(__file__).resolve().parents[1])
# What a check's child process may see of this process's environment: an allow-list, so that a
# service's credentials (database and broker URLs, cloud keys, DSNs, in any spelling) never reach
# code that runs on a hostile model. Exact names, then prefixes (case-sensitive, as POSIX is).
SAFE_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        OWNER_ENV,  # marks a service worker's check processes (checks.lifeline), not a secret
    }
)
SAFE_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "CUDNN_", "TRT_", "TENSORRT_", "OMP_", "MKL_", "OPENBLAS_", "ORT_")


def is_safe_env_name(name: str) -> bool:
    return name in SAFE_ENV_NAMES or name.startswith(SAFE_ENV_PREFIXES)


def safe_child_env(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of ``base`` (default: this process's environment), plus ``extra``
    (trusted values, added as given). For every process that runs a check (spec kinds, command
    checks from a spec, the service worker's check process)."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items() if is_safe_env_name(k)}
    env.update(extra or {})
    return env


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``safe_child_env`` (plus ``extra``: a slot's device) with the project importable from the
    child's private working directory (``python -m checks.child`` runs there) and one OpenMP
    thread unless the user set it."""
    env = safe_child_env(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_isolated(
    payload: Mapping[str, Any],
    timeout_s: float,
    memory_limit_bytes: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    python: str | None = None,
    *,
    warm: bool = False,
) -> tuple[Verdict, str]:
    """Run ``payload['entry']`` in a child process; never raises for what happens in the child.
    Above ``memory_limit_bytes`` of resident memory (``checks.memory``) the child and everything
    it started are killed: a ``crash`` with signature ``memory-limit``. ``extra_env``: trusted
    variables added to the child's allow-listed environment (a slot's ``CUDA_VISIBLE_DEVICES``).
    ``python``: another environment's interpreter runs the child (always cold); None: this one.
    ``warm``: the child is forked by a warm runner of this process (``checks.warm``: the same
    isolation without the interpreter's start-up) where one runs, else started cold."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="onnx-reducer-check-") as tmp:
        result_path = Path(tmp) / "result.json"
        payload_path = Path(tmp) / "payload.json"
        payload_path.write_text(json.dumps({**payload, "result": str(result_path)}))
        env = child_env(extra_env)
        warm_here = warm and python is None  # a runner forks this interpreter only
        ran = run_warm(env, payload_path, Path(tmp), timeout_s, memory_limit_bytes) if warm_here else None
        if ran is None:
            try:
                ran = _run_cold(python or sys.executable, payload_path, Path(tmp), env, timeout_s, memory_limit_bytes)
            except OSError as exc:  # its reason without the interpreter's path (a server's, for a RUNTIME_ENVS one)
                reason = f"cannot start the check process: {exc.strerror or type(exc).__name__}"
                return Verdict(VerdictKind.INFRA_ERROR, "", reason), reason
        duration = time.monotonic() - started
        if ran.stopped is not None:
            return ran.stopped.verdict(duration), ran.output
        return _verdict_from(ran.returncode, result_path, ran.output, duration)


def _run_cold(
    python: str,
    payload_path: Path,
    folder: Path,
    env: Mapping[str, str],
    timeout_s: float,
    memory_limit_bytes: int | None,
) -> ChildRun:
    """``PYTHON -m checks.child PAYLOAD`` in ``folder``, a session of its own; raises ``OSError``
    when it cannot start."""
    proc = subprocess.Popen(
        [python, "-m", "checks.child", str(payload_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        cwd=folder,
        env=dict(env),
    )
    output = StreamCapture()
    assert proc.stdout is not None
    with proc:
        stopped = pump(proc, [(proc.stdout, output)], timeout_s, memory_limit_bytes)
        kill_group(proc)  # on timeout, or grandchildren left behind by the runtime
        if stopped is not None:
            pump(proc, [(proc.stdout, output)], KILL_GRACE_S)
    return ChildRun(stopped, proc.returncode, output.text())


def _verdict_from(code: int, result_path: Path, text: str, duration: float) -> tuple[Verdict, str]:
    if code < 0:
        name = signal_name(-code)
        return Verdict(VerdictKind.CRASH, f"signal={name}", f"check process killed by {name}", duration), text
    try:
        result = json.loads(result_path.read_text())
    except (OSError, ValueError):
        detail = f"check process exited with code {code} without a result"
        return Verdict(VerdictKind.CRASH, f"exit={code}", detail, duration), text
    output = _bounded(str(result.get("output", "")))
    combined = "\n".join(t for t in (text.strip(), output.strip()) if t)
    kind = VerdictKind(str(result["kind"]))
    return Verdict(kind, str(result.get("signature", "")), str(result.get("detail", "")), duration), combined


def _bounded(text: str) -> str:
    kept = BoundedText()
    kept.add(text)
    return kept.text()


@dataclass(frozen=True)
class IsolatedSpecCheck:
    """compare / golden / error / op-present: the work happens in ``checks.kinds`` in a child."""

    spec: CheckSpec
    golden: Path | None = None
    entry: str = SPEC_ENTRY
    extra_env: Mapping[str, str] = field(default_factory=dict, compare=False)  # a slot's device
    python: str | None = None  # another environment's interpreter (``run_isolated``); None: this one

    @property
    def identity(self) -> str:
        golden = f" golden={self.golden.resolve()}" if self.golden is not None else ""
        python = f" python={self.python}" if self.python is not None else ""
        return self.spec.identity + golden + python

    def run(self, model_path: Path) -> tuple[Verdict, str]:
        payload = {
            "entry": self.entry,
            "spec": self.spec.to_json(),
            "model": str(Path(model_path).resolve()),
            "golden": str(self.golden.resolve()) if self.golden is not None else None,
            "reference_cache": reuse_folder() if self.python is None else None,  # checks.reference_cache
        }
        return run_isolated(payload, self.spec.timeout, self.spec.memory_limit, self.extra_env, self.python, warm=True)


@dataclass(frozen=True)
class SpecCommandCheck:
    """kind: command. ``{model}`` in the command is replaced by the iteration model's path;
    without it the command reads the iteration artifact itself, as with ``--check``. The command
    sees only the allow-listed environment (``safe_child_env``) unless ``env`` is given; the
    command line's own ``--check COMMAND`` runs a ``CommandCheck`` with the user's full
    environment instead, as Polygraphy does."""

    spec: CheckSpec
    env: Mapping[str, str] | None = field(default=None, compare=False)  # None: ``safe_child_env()``
    cwd: Path | None = None  # where the command runs (the service: the job's work folder)

    @property
    def identity(self) -> str:
        return self.spec.identity

    def run(self, model_path: Path) -> tuple[Verdict, str]:
        command = [part.replace("{model}", str(model_path)) for part in self.spec.command]
        check = CommandCheck(
            command=command,
            fail_codes=self.spec.fail_codes,
            ignore_fail_codes=self.spec.ignore_fail_codes,
            fail_regexes=self.spec.fail_regex,
            timeout_s=self.spec.timeout,
            memory_limit_bytes=self.spec.memory_limit,
            env=safe_child_env() if self.env is None else dict(self.env),
            cwd=self.cwd,
        )
        return check.run(model_path)


@dataclass
class RepeatedCheck:
    """Run ``base`` ``repeat`` times; the model fails when ``fail_if`` (any, all, majority) of the
    runs fail. The verdict is the most common failure family's (``reducer_core.verdict``: e.g. two
    runs matching different listed regexes outvote one crash), with that family's most common
    signature; its detail gives the failure rate (``failed 2/3 runs``), also kept in ``last_rate``
    for the flaky-original report."""

    base: ModelCheck
    repeat: int
    fail_if: str = "any"
    last_rate: tuple[int, int] = (0, 0)

    @property
    def identity(self) -> str:
        return f"{self.base.identity} repeat={self.repeat} fail_if={self.fail_if}"

    def run(self, model_path: Path) -> tuple[Verdict, str]:
        verdicts: list[Verdict] = []
        outputs: list[str] = []
        for _ in range(self.repeat):
            verdict, output = self.base.run(model_path)
            if verdict.kind is VerdictKind.INFRA_ERROR:
                return verdict, output
            verdicts.append(verdict)
            outputs.append(output)
        return self._combine(verdicts, outputs)

    def _combine(self, verdicts: list[Verdict], outputs: list[str]) -> tuple[Verdict, str]:
        failures = [v for v in verdicts if v.is_failure]
        runs = len(verdicts)
        self.last_rate = (len(failures), runs)
        needed = {"any": 1, "all": runs, "majority": runs // 2 + 1}[self.fail_if]
        duration = sum(v.duration_s for v in verdicts)
        rate = f"failed {len(failures)}/{runs} runs (fail_if={self.fail_if})"
        text = "\n".join(
            f"--- run {i + 1}: {v.kind.value} {v.signature}\n{o}"
            for i, (v, o) in enumerate(zip(verdicts, outputs, strict=True))
        )
        if len(failures) >= needed and failures:
            family, _ = collections.Counter(v.family for v in failures).most_common(1)[0]
            members = [v for v in failures if v.family == family]
            signature, _ = collections.Counter((v.kind, v.signature) for v in members).most_common(1)[0]
            first = next(v for v in members if (v.kind, v.signature) == signature)
            return Verdict(signature[0], signature[1], f"{first.detail}; {rate}", duration), text
        return Verdict(VerdictKind.PASS, "", rate, duration), text
