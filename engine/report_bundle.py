"""A finished service job's bug-report bundle (``engine.bundle``), built by the worker that
finished the job and stored as the job's ``bundle`` artifact (in any store with ``put_file``).

Built at the job's end rather than on each download: its ``environment.json`` must name the
worker's runtimes, providers and GPU (the API process has none of them), and building it runs the
bundle's ``repro.py`` on the models (model code belongs on workers, never in the API). A download
then serves a stored file. A bundle that cannot be built never fails the job: the job has no
``bundle`` artifact and the download says why. Nor is a bundle kept whose self-check did not
reproduce the pinned failure on min-bad (or did not pass min-good) in its clean environment
(``engine.bundle``): ``store_bundle`` answers ``NoBundle`` with the reason, which the job's end
event carries (``bundle_refused``) and the download's 404 repeats."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from checks.isolated import safe_child_env
from checks.spec import CheckSpec
from engine.bundle import BundleCheck, write_bundle
from engine.workspace import Workspace
from reducer_core.records import ReductionResult
from reducer_core.verdict import Pinning

log = logging.getLogger(__name__)

Blob_co = TypeVar("Blob_co", covariant=True)
B = TypeVar("B")


class FileStore(Protocol[Blob_co]):
    """Where the bundle is kept (the service's ``persistence.store.ArtifactStore``)."""

    def put_file(self, path: Path) -> Blob_co: ...


@dataclass(frozen=True)
class NoBundle:
    """No bundle was kept: ``reason`` says why, in words fit for the job's event (no server paths);
    ``checks_run``: the self-check's runs all the same."""

    reason: str
    checks_run: int = 0


def store_bundle(
    store: FileStore[B],
    workspace: Workspace,
    result: ReductionResult,
    spec: CheckSpec,
    golden: Path | None,
    work_dir: Path,
    original_name: str,
    worker: str,
    verified: Mapping[str, bool] | None = None,
    pinning: bool | Pinning = Pinning.KIND,
) -> tuple[B, dict[str, Any]] | NoBundle:
    """The stored bundle and its meta (``finding``, ``reproduced``, ``members``, ``checks_run``:
    the runs of its self-check, ``engine.bundle``), or ``NoBundle`` when it could not be built
    (logged) or its self-check did not reproduce the pinned failure (``pinning``: the job's)."""
    folder = work_dir / "result-bundle"
    shutil.rmtree(folder, ignore_errors=True)
    check = dataclasses.replace(
        BundleCheck.of_spec(spec, golden, cwd=work_dir), env=safe_child_env(), pinning=Pinning.of(pinning)
    )
    try:
        report = write_bundle(
            folder / "bundle.zip", workspace, result, check, workspace.options.model, worker, original_name, verified
        )
        if not report.verified:
            reason = f"the bug-report bundle is not kept: {report.why_unverified()}"
            log.warning(reason)
            return NoBundle(reason, report.checks_run)
        blob = store.put_file(report.path)
    except Exception:  # the job's result stands without its bundle
        log.exception("could not build the bug-report bundle")
        return NoBundle("the worker could not build the bug-report bundle (see its log)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    meta: dict[str, Any] = {"finding": report.finding, "reproduced": report.reproduced, "members": report.members}
    meta |= {"checks_run": report.checks_run, "reused": []}
    return blob, meta


def put_answer(bundle: Path, name: str, answer: Mapping[str, Any]) -> None:
    """``bundle`` (a reduction's zip) with ``name`` (a bisection's answer as JSON: ``passes.json``,
    ``releases.json``, which its ``repro.py`` prints) in it, in place of one it held."""
    partial = bundle.with_name(bundle.name + ".partial")
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, True) as target:
        for item in source.infolist():
            if item.filename != name:
                target.writestr(item, source.read(item.filename))
        target.writestr(name, json.dumps(answer, indent=1))
    os.replace(partial, bundle)
