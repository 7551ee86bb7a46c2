"""Entry point of a check's child process: ``python -m checks.child PAYLOAD_JSON``.

Imports the payload's ``entry`` (``module:function``), calls it with the payload and writes the
returned ``{kind, signature, detail, output}`` to the payload's ``result`` path. An exception in
the entry point is an ``infra-error`` (the check is broken, not the model)."""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from checks.lifeline import die_with_parent_now


def _call(payload: dict[str, Any]) -> dict[str, Any]:
    module_name, _, function_name = str(payload["entry"]).partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    result = function(payload)
    assert isinstance(result, dict)
    return result


def main(argv: list[str]) -> int:
    die_with_parent_now()  # the check dies with the process that started it (checks.lifeline)
    payload = json.loads(Path(argv[0]).read_text())
    try:
        result = _call(payload)
    except Exception as exc:  # noqa: BLE001 - every failure of the harness becomes infra-error
        result = {
            "kind": "infra-error",
            "signature": "",
            "detail": f"the check itself failed: {type(exc).__name__}: {exc}",
            "output": traceback.format_exc(),
        }
    target = Path(payload["result"])
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
