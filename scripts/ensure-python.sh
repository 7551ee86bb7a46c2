#!/usr/bin/env bash
# Make sure a Python >= 3.11 with venv and pip exists (fresh Debian: python3-venv is a separate
# package). Prints the interpreter to use. Installs Debian packages only when something is missing.
set -euo pipefail
python=${PYTHON:-python3}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v "$python" >/dev/null 2>&1; then
  echo "ensure-python: installing python3 (Debian package)" >&2
  as_root apt-get update -qq >&2 && as_root apt-get install -y -qq python3 python3-venv >&2
fi
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "ensure-python: $python is $("$python" --version 2>&1); onnx-reducer needs Python 3.11 or newer." >&2
  exit 1
fi
probe=$(mktemp -d)
if ! "$python" -m venv "$probe/v" >/dev/null 2>&1; then
  echo "ensure-python: installing python3-venv (Debian package)" >&2
  as_root apt-get update -qq >&2 && as_root apt-get install -y -qq python3-venv >&2
fi
rm -rf "$probe"
echo "$python"
