"""Team tokens managed by a team admin (issue 29) over HTTP with PostgreSQL: an admin token (made
by `onnx-reducer token create --admin`) creates a token (shown once), lists the team's tokens and
revokes one, which is then refused; an ordinary token gets 403 with the command that makes an
admin one; another team's token is out of reach (404); the audit record lists the token and
deletion events, newest first, with who did them."""

from __future__ import annotations

import os
import subprocess
import time

import httpx

from tests.service.conftest import client_for
from tests.service.helpers import OP_PRESENT_MUL, chain_model, submit

DEADLINE_S = 60.0


def _cli_token(db_url: str, team: str, *extra: str) -> str:
    env = dict(os.environ, DATABASE_URL=db_url)
    done = subprocess.run(
        ["onnx-reducer", "token", "create", "--team", team, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def _refused_soon(base_url: str, token: str) -> bool:
    """The token is refused within the token cache's time (polled until then)."""
    deadline = time.monotonic() + DEADLINE_S
    with client_for(base_url, token) as client:
        while time.monotonic() < deadline:
            if client.get("/v1/jobs").status_code == 401:
                return True
            time.sleep(0.2)
    return False


def test_an_admin_manages_the_teams_tokens_and_reads_the_audit_record(
    quiet_api: str, db_url: str, tokens: dict[str, str]
) -> None:
    admin_token = _cli_token(db_url, "team-a", "--admin", "--name", "ops")
    other_admin = _cli_token(db_url, "team-b", "--admin")
    ordinary = tokens["team-a"]

    with client_for(quiet_api, ordinary) as client:
        refused = client.get("/v1/tokens")
        assert refused.status_code == 403
        assert "onnx-reducer token create --team team-a --admin" in refused.json()["detail"]
        assert client.post("/v1/tokens", json={"name": "x"}).status_code == 403
        assert client.get("/v1/audit").status_code == 403

    with client_for(quiet_api, admin_token) as admin:
        made = admin.post("/v1/tokens", json={"name": "ci pipeline"})
        assert made.status_code == 201, made.text
        new = made.json()
        assert new["token"].startswith(new["prefix"]) and new["name"] == "ci pipeline" and not new["admin"]
        with client_for(quiet_api, new["token"]) as ci:
            assert ci.get("/v1/jobs").status_code == 200
        listed = admin.get("/v1/tokens").json()["items"]
        assert [(t["name"], t["admin"]) for t in listed] == [("", False), ("ops", True), ("ci pipeline", False)]
        assert all("token" not in t for t in listed) and all(t["revoked_at"] is None for t in listed)
        assert admin.post("/v1/tokens", json={"name": "n" * 101}).status_code == 422

        assert admin.delete(f"/v1/tokens/{new['id']}").status_code == 204
        assert admin.delete(f"/v1/tokens/{new['id']}").status_code == 204  # again: nothing changes
        assert _refused_soon(quiet_api, new["token"])
        revoked = {t["id"]: t for t in admin.get("/v1/tokens").json()["items"]}[new["id"]]
        assert revoked["revoked_at"] is not None

    with client_for(quiet_api, other_admin) as stranger:
        assert stranger.delete(f"/v1/tokens/{listed[0]['id']}").status_code == 404
        assert [t["admin"] for t in stranger.get("/v1/tokens").json()["items"]] == [False, True]  # team-b's own
        seen = [(e["action"], e["target"]) for e in stranger.get("/v1/audit").json()["items"]]
        assert seen == [("token.created", other_admin[:12])]  # team-b's record: nothing of team-a's
        assert stranger.delete("/v1/tokens/not-a-token-id").status_code == 404

    with client_for(quiet_api, ordinary) as client:
        job_id = submit(client, chain_model(6, 3).SerializeToString(), OP_PRESENT_MUL).json()["id"]
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 204

    with client_for(quiet_api, admin_token) as admin:
        record = admin.get("/v1/audit").json()
    events = [(e["action"], e["actor"], e["target"]) for e in record["items"]]
    assert events == [
        ("job.deleted", f"token {ordinary[:12]}", job_id),
        ("token.revoked", f"token {admin_token[:12]}", new["prefix"]),
        ("token.created", f"token {admin_token[:12]}", new["prefix"]),
        ("token.created", "cli", admin_token[:12]),
    ]
    assert record["items"][0]["detail"]["model"] == "model.onnx"
    assert record["items"][3]["detail"] == {"prefix": admin_token[:12], "name": "ops", "admin": True}
    with client_for(quiet_api, admin_token) as admin:
        older = admin.get("/v1/audit", params={"limit": 2}).json()
        assert older["next_before"] == record["items"][1]["id"]
        rest = admin.get("/v1/audit", params={"before": older["next_before"]}).json()["items"]
        assert [e["action"] for e in rest] == ["token.created", "token.created"]


def test_a_missing_or_wrong_token_is_401_not_403(quiet_api: str) -> None:
    assert httpx.get(quiet_api + "/v1/tokens").status_code == 401
    assert httpx.get(quiet_api + "/v1/audit", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_token_list_says_which_tokens_are_admin(db_url: str) -> None:
    admin = _cli_token(db_url, "team-c", "--admin")
    member = _cli_token(db_url, "team-c")
    env = dict(os.environ, DATABASE_URL=db_url)
    listed = subprocess.run(
        ["onnx-reducer", "token", "list"], env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()
    assert listed[0].split() == ["PREFIX", "TEAM", "ROLE", "CREATED", "REVOKED"]
    roles = {line.split()[0]: line.split()[2] for line in listed[1:]}
    assert roles[admin[:12]] == "admin" and roles[member[:12]] == "member"
