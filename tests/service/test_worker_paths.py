"""A command check of a service job means the same on every worker that runs it: each worker
(a Celery process, or a slot of the embedded runner) prepares the job in its own folder, a sibling
of the others at the same depth below the job's work folder, holding the same names (the iteration
model, its weights, the golden values) and running the command with the same allow-listed
environment. So the iteration model by its name and relative paths (``..`` too) resolve alike on
every worker, and a scratch file a check writes in its folder is that worker's own."""

from __future__ import annotations

import threading
from pathlib import Path

import onnx

from checks.spec import parse_check_spec
from persistence.db import Database
from persistence.layout import DataLayout
from reducer_core.candidate import Candidate
from reducer_core.config import SessionConfig
from reducer_core.verdict import Verdict, VerdictKind
from tests.service.helpers import chain_model
from worker.context import RunnerContext
from worker.prepared import JobInput, prepare
from worker.unit_run import ITERATION_MODEL

# pwd, the folder's names, a scratch file read back, the parent's entries, and the iteration model by
# its name, reached from the parent: fails (exit 1) while the Mul node is in it
COMMAND = (
    'pwd; ls; echo $$ > scratch.txt; test "$(cat scratch.txt)" = $$ || exit 3; '
    'here=$(basename "$PWD"); cd .. && ls -d */ | wc -l; ! grep -q n3_Mul "$here/' + ITERATION_MODEL + '"'
)
SPEC = f"kind: command\ncommand: [sh, -c, '{COMMAND}']\ntimeout: 60\n"


def test_every_worker_of_a_job_runs_its_command_check_in_a_folder_alike(db_url: str, data_dir: Path) -> None:
    layout = DataLayout(data_dir.resolve())
    job_id = "pathsjob"
    model = layout.model_dir(job_id) / "model.onnx"
    model.parent.mkdir(parents=True)
    onnx.save(chain_model(6, 3), str(model))
    job = JobInput(job_id, parse_check_spec(SPEC).to_json(), SessionConfig(), str(model.relative_to(layout.root)), None)
    ctx = RunnerContext(
        db=Database(db_url), layout=layout, lease_s=60, max_attempts=1, time_limit_s=60, allow_command=True
    )
    together = threading.Barrier(2)  # both alive at once: two workers, two folders
    seen: dict[int, tuple[Path, Verdict, str]] = {}

    def worker(number: int) -> None:
        prepared = prepare(job, ctx)
        try:
            path = prepared.work_dir / ITERATION_MODEL
            prepared.write(Candidate(frozenset(range(len(prepared.workspace.index)))), path)
            verdict, output = prepared.check.run(path)
            seen[number] = (prepared.work_dir, verdict, output)
            together.wait(timeout=60)
        finally:
            prepared.close()

    threads = [threading.Thread(target=worker, args=(number,)) for number in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    ctx.db.dispose()

    (first, verdict1, output1), (second, verdict2, output2) = seen[1], seen[2]
    assert first != second and first.parent == second.parent == layout.work_dir(job_id)
    assert (verdict1.kind, verdict1.signature) == (verdict2.kind, verdict2.signature) == (VerdictKind.FAIL, "exit=1")
    lines1, lines2 = output1.splitlines(), output2.splitlines()
    assert (Path(lines1[0]), Path(lines2[0])) == (first, second), "the command runs in its worker's folder"
    assert lines1[1:] == lines2[1:], "the same names in each folder, the same entries beside it"
    assert ITERATION_MODEL in lines1 and lines1[-1].strip() == "2", output1
