"""The CI run a submission comes from, as job labels: which provider (``ci``), the repository
(``repo``, as ``owner/name``), ``commit``, ``branch``, the run's page (``run_url``), and the W3C
``traceparent`` when the pipeline traces its steps (``TRACEPARENT``, the convention of
otel-cli and the OpenTelemetry CI/CD semantic conventions). Read from the variables each provider
sets: GitHub Actions, GitLab CI, Jenkins and Buildkite; outside CI only ``traceparent``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

Env = Mapping[str, str]

# W3C trace context: version ff, a trace id or a parent id of zeros are invalid
_TRACEPARENT = re.compile(r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


def repo_from_url(url: str) -> str:
    """``owner/name`` from a clone URL (``https://host/owner/name.git``, ``git@host:owner/name.git``)."""
    url = url.strip()
    scp_like = url.partition(":")[2]  # git@host:owner/name.git
    path = (urlsplit(url).path if "://" in url else scp_like or url).strip("/")
    return path.removesuffix(".git") or url


def _github(env: Env) -> dict[str, str]:
    repo = env.get("GITHUB_REPOSITORY", "")
    server, run = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/"), env.get("GITHUB_RUN_ID", "")
    return {
        "repo": repo,
        "commit": env.get("GITHUB_SHA", ""),
        "branch": env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME", ""),  # a pull request's own branch
        "run_url": f"{server}/{repo}/actions/runs/{run}" if repo and run else "",
    }


def _gitlab(env: Env) -> dict[str, str]:
    return {
        "repo": env.get("CI_PROJECT_PATH", ""),
        "commit": env.get("CI_COMMIT_SHA", ""),
        "branch": env.get("CI_COMMIT_REF_NAME", ""),
        "run_url": env.get("CI_PIPELINE_URL", ""),
    }


def _jenkins(env: Env) -> dict[str, str]:
    branch = env.get("GIT_BRANCH", "")
    return {
        "repo": repo_from_url(env["GIT_URL"]) if env.get("GIT_URL") else "",
        "commit": env.get("GIT_COMMIT", ""),
        "branch": branch.removeprefix("origin/"),  # the Git plugin names the remote branch
        "run_url": env.get("BUILD_URL", ""),
    }


def _buildkite(env: Env) -> dict[str, str]:
    return {
        "repo": repo_from_url(env["BUILDKITE_REPO"]) if env.get("BUILDKITE_REPO") else "",
        "commit": env.get("BUILDKITE_COMMIT", ""),
        "branch": env.get("BUILDKITE_BRANCH", ""),
        "run_url": env.get("BUILDKITE_BUILD_URL", ""),
    }


# (label value of ``ci``, how the provider says it runs, its variables)
PROVIDERS: tuple[tuple[str, Callable[[Env], bool], Callable[[Env], dict[str, str]]], ...] = (
    ("github-actions", lambda env: env.get("GITHUB_ACTIONS") == "true", _github),
    ("gitlab-ci", lambda env: env.get("GITLAB_CI") == "true", _gitlab),
    ("buildkite", lambda env: env.get("BUILDKITE") == "true", _buildkite),
    ("jenkins", lambda env: bool(env.get("JENKINS_URL")) and bool(env.get("BUILD_URL")), _jenkins),
)


# every variable read here (a test runs the command line with none of them but its own)
PROVIDER_VARIABLES = frozenset(
    {
        *("GITHUB_ACTIONS", "GITHUB_REPOSITORY", "GITHUB_SHA", "GITHUB_HEAD_REF", "GITHUB_REF_NAME"),
        *("GITHUB_SERVER_URL", "GITHUB_RUN_ID", "GITLAB_CI", "CI_PROJECT_PATH", "CI_COMMIT_SHA"),
        *("CI_COMMIT_REF_NAME", "CI_PIPELINE_URL", "JENKINS_URL", "GIT_URL", "GIT_COMMIT", "GIT_BRANCH"),
        *("BUILD_URL", "BUILDKITE", "BUILDKITE_REPO", "BUILDKITE_COMMIT", "BUILDKITE_BRANCH"),
        *("BUILDKITE_BUILD_URL", "TRACEPARENT"),
    }
)


def ci_labels(env: Env) -> dict[str, str]:
    """The labels of the CI run ``env`` describes (empty values left out); ``{}`` outside CI and
    without a valid ``TRACEPARENT``."""
    labels: dict[str, str] = {}
    for name, runs_here, read in PROVIDERS:
        if runs_here(env):
            labels = {"ci": name, **{k: v for k, v in read(env).items() if v}}
            break
    traceparent = _four_fields(env.get("TRACEPARENT", "").strip().lower())
    if traceparent is not None:
        labels["traceparent"] = traceparent
    return labels


def _four_fields(traceparent: str) -> str | None:
    """A valid W3C ``traceparent``'s four fields: version 00 is exactly them; a later version is
    read by them (what it adds after a ``-`` is not sent), as Trace Context asks of a receiver."""
    match = _TRACEPARENT.match(traceparent)
    if match is None:
        return None
    tail = traceparent[match.end() :]
    if tail and (traceparent.startswith("00") or not tail.startswith("-")):
        return None
    return match[0]


def parse_label(text: str) -> tuple[str, str]:
    """``key=value`` (``--label``); the server checks the key's characters and the sizes."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--label {text!r}: write it as key=value (e.g. --label team=vision).")
    return key.strip(), value
