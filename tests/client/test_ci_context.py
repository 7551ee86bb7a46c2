"""The CI context ``onnx-reducer submit`` sends as labels, read from each provider's variables."""

from __future__ import annotations

import pytest

from reducer_client.ci_context import ci_labels, parse_label, repo_from_url

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_github_actions_gives_repo_commit_branch_and_the_run_url() -> None:
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": "org/app",
        "GITHUB_SHA": "abc",
        "GITHUB_REF_NAME": "12/merge",
        "GITHUB_HEAD_REF": "fix-fp16",
        "GITHUB_SERVER_URL": "https://ghe.example.com/",
        "GITHUB_RUN_ID": "77",
    }
    assert ci_labels(env) == {
        "ci": "github-actions",
        "repo": "org/app",
        "commit": "abc",
        "branch": "fix-fp16",  # a pull request's own branch, not "12/merge"
        "run_url": "https://ghe.example.com/org/app/actions/runs/77",
    }


def test_gitlab_jenkins_and_buildkite() -> None:
    gitlab = {
        "GITLAB_CI": "true",
        "CI_PROJECT_PATH": "group/sub/app",
        "CI_COMMIT_SHA": "c1",
        "CI_COMMIT_REF_NAME": "main",
        "CI_PIPELINE_URL": "https://gitlab.example.com/group/sub/app/-/pipelines/5",
    }
    assert ci_labels(gitlab) == {
        "ci": "gitlab-ci",
        "repo": "group/sub/app",
        "commit": "c1",
        "branch": "main",
        "run_url": "https://gitlab.example.com/group/sub/app/-/pipelines/5",
    }
    jenkins = {
        "JENKINS_URL": "https://ci.example.com/",
        "GIT_URL": "https://github.com/org/app.git",
        "GIT_COMMIT": "c2",
        "GIT_BRANCH": "origin/release",
        "BUILD_URL": "https://ci.example.com/job/app/3/",
    }
    assert ci_labels(jenkins) == {
        "ci": "jenkins",
        "repo": "org/app",
        "commit": "c2",
        "branch": "release",
        "run_url": "https://ci.example.com/job/app/3/",
    }
    buildkite = {
        "BUILDKITE": "true",
        "BUILDKITE_REPO": "git@github.com:org/app.git",
        "BUILDKITE_COMMIT": "c3",
        "BUILDKITE_BRANCH": "dev",
        "BUILDKITE_BUILD_URL": "https://buildkite.com/org/app/builds/9",
        "TRACEPARENT": TRACEPARENT.upper(),
    }
    assert ci_labels(buildkite) == {
        "ci": "buildkite",
        "repo": "org/app",
        "commit": "c3",
        "branch": "dev",
        "run_url": "https://buildkite.com/org/app/builds/9",
        "traceparent": TRACEPARENT,
    }


def test_outside_ci_only_a_valid_traceparent() -> None:
    assert ci_labels({"GITHUB_REPOSITORY": "org/app"}) == {}  # not inside Actions: GITHUB_ACTIONS unset
    assert ci_labels({"TRACEPARENT": TRACEPARENT}) == {"traceparent": TRACEPARENT}
    assert ci_labels({"TRACEPARENT": "garbage"}) == {}
    invalid = ("ff" + TRACEPARENT[2:], f"00-{'0' * 32}-00f067aa0ba902b7-01", f"00-{'1' * 32}-{'0' * 16}-01")
    assert [ci_labels({"TRACEPARENT": text}) for text in invalid] == [{}, {}, {}]


def test_a_later_traceparent_version_is_sent_as_its_first_four_fields() -> None:
    later = "cc" + TRACEPARENT[2:]
    assert ci_labels({"TRACEPARENT": later + "-what-the-future-adds"}) == {"traceparent": later}
    assert ci_labels({"TRACEPARENT": later}) == {"traceparent": later}
    assert ci_labels({"TRACEPARENT": TRACEPARENT + "-extra"}) == {}  # version 00 has exactly four
    assert ci_labels({"TRACEPARENT": later + "extra"}) == {}  # a later version's addition starts with "-"


@pytest.mark.parametrize(
    ("url", "repo"),
    [
        ("https://github.com/org/app.git", "org/app"),
        ("git@gitlab.com:group/app.git", "group/app"),
        ("ssh://git@host:22/org/app", "org/app"),
    ],
)
def test_repo_from_clone_urls(url: str, repo: str) -> None:
    assert repo_from_url(url) == repo


def test_parse_label() -> None:
    assert parse_label("a=b=c") == ("a", "b=c")
    with pytest.raises(ValueError, match="key=value"):
        parse_label("novalue")
