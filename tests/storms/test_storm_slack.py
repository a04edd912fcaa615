"""A storm's one Slack message, against a fake Slack Web API on 127.0.0.1 and the strict fake API server: posted
once, edited in place (same channel and ts) as nodes join, edited a last time when the group is decided; its
approve-group link opens the storm's page and decides once (CSRF, a typed name on an open loopback UI), and
every text it carries is escaped for Slack. With an incoming webhook (no bot token) the storm is posted once
when it opens and once when it is decided."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.engine.conftest import Cluster, MakeCluster
from tests.notify.receiver import receiver
from tests.notify.slack_api import FakeSlack, fake_slack
from tests.storms.test_storm_hold import by_node, fault, storm_cluster

DRIVER = "nvidia.com/cuda.driver-version.full"
CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


def bot(slack: FakeSlack) -> dict[str, Any]:
    return {"slack_bot_token": "xoxb-test", "slack_channel": "#gpu-ops", "slack_api_url": slack.url,
            "notify_backoff": "10ms", "public_url": "http://remediator.example"}


def storm_calls(slack: FakeSlack) -> list[Any]:
    return [c for c in slack.calls if c.body.get("text", "").startswith("Storm")]


async def told(cluster: Cluster) -> None:
    await cluster.settle()
    assert cluster.rt.notifier is not None
    await cluster.rt.notifier.flush(20)


async def test_one_message_per_storm_edited_as_it_grows_and_decided_through_its_link(
    make_cluster: MakeCluster,
) -> None:
    async with fake_slack() as slack:
        cluster = await storm_cluster(make_cluster, **bot(slack))
        await fault(cluster, "n00", "n01", "n02", "n03", "n04", "n10")
        await told(cluster)
        (storm,) = (await cluster.api.get("/api/v1/storms")).json()
        (post,) = [c for c in storm_calls(slack) if c.method == "chat.postMessage"]
        assert post.body["channel"] == "#gpu-ops"
        # The storm's message tells of its holds: no "Held by a guardrail" message per held remediation.
        assert not [c for c in slack.calls if "Held by a guardrail" in json.dumps(c.body)]
        first = post.body["text"]
        assert first.startswith("Storm on nodes running driver 580.95.05: 5 nodes faulting, held for one decision: "
                                f"*Suspected cause:* 5 of 6 faulting nodes carry label {DRIVER}=580.95.05; 20% of "
                                "the fleet does"), first
        assert "5 remediations on nodes running driver 580.95.05 wait for one group decision" in first
        assert f"storm `{storm['id']}`" in first
        blocks = json.dumps(post.body["blocks"])
        links = re.findall(rf"http://remediator\.example/storms/{storm['id']}/approval/[A-Za-z0-9_-]{{43}}", blocks)
        assert len(links) == 1 and f"http://remediator.example/storms/{storm['id']}\"" in blocks
        ts = next(t for t, m in slack.messages.items() if m is post.body)  # after the remediations' own messages
        kept = (await cluster.api.get(f"/api/v1/storms/{storm['id']}")).json()["slack"]
        assert kept == {"channel": "C0GPUOPS", "ts": ts}

        # A node with the driver joins: the same message is edited, not a new one posted.
        await fault(cluster, "n05")
        await told(cluster)
        assert len([c for c in storm_calls(slack) if c.method == "chat.postMessage"]) == 1
        updates = [c for c in storm_calls(slack) if c.method == "chat.update"]
        assert updates and {(u.body["channel"], u.body["ts"]) for u in updates} == {("C0GPUOPS", ts)}
        grown = slack.messages[ts]["text"]
        assert "6 remediations on nodes running driver 580.95.05 wait" in grown and "n05" in grown
        assert re.search(r"/approval/[A-Za-z0-9_-]{43}", json.dumps(slack.messages[ts]["blocks"]))

        # The link: GET shows the storm and changes nothing; a tampered token is refused.
        link = links[0].removeprefix("http://remediator.example")
        page = await cluster.api.get(link)
        assert page.status_code == 200, page.text
        assert "Release 6 held remediations on nodes running driver 580.95.05" in page.text
        assert (await cluster.api.get(link[:-3] + "AAA")).status_code == 404
        assert (await cluster.api.get(f"/api/v1/storms/{storm['id']}")).json()["state"] == "open"
        token = CSRF.search(page.text)
        assert token is not None
        # Without the page's CSRF token nothing is decided.
        refused = await cluster.api.post(link, data={"csrf": "0" * 64, "decision": "approve", "name": "mallory"})
        assert refused.status_code == 403
        decided = await cluster.api.post(link, data={"csrf": token.group(1), "decision": "approve",
                                                      "name": "oncall", "reason": "<!channel> known rollout"})
        assert decided.status_code == 200, decided.text
        assert "Recorded: approved by oncall; 6 held remediations released." in decided.text
        again = await cluster.api.post(link, data={"csrf": token.group(1), "decision": "reject", "name": "late",
                                                   "reason": "no"})
        assert again.status_code == 409 and "already approved by oncall" in again.text
        await told(cluster)
        rems = await by_node(cluster)
        assert all(rems[n]["state"] != "held" for n in ("n00", "n01", "n02", "n03", "n04", "n05")), rems
        audit = (await cluster.api.get("/api/v1/audit", params={"limit": 10000})).json()
        (approved,) = [e for e in audit if e["kind"] == "storm.approved"]
        assert approved["actor"] == "oncall" and len(approved["data"]["remediations"]) == 6

        # The last edit: who decided, the reason escaped for Slack, no approve link left.
        assert len([c for c in storm_calls(slack) if c.method == "chat.postMessage"]) == 1
        final = slack.messages[ts]
        assert final["text"].startswith("Storm on nodes running driver 580.95.05 approved by oncall: ")
        assert "&lt;!channel&gt; known rollout" in final["text"] and "<!channel>" not in json.dumps(final)
        assert "/approval/" not in json.dumps(final["blocks"])
        assert storm_calls(slack)[-1].method == "chat.update"


async def test_an_incoming_webhook_is_told_once_when_the_storm_opens_and_once_when_it_is_decided(
    make_cluster: MakeCluster,
) -> None:
    async with receiver() as hook:
        cluster = await storm_cluster(make_cluster, slack_webhook_url=hook.url, notify_backoff="10ms")
        await fault(cluster, "n00", "n01", "n02", "n03", "n04", "n10")
        await told(cluster)
        await fault(cluster, "n05")
        await told(cluster)
        (storm,) = (await cluster.api.get("/api/v1/storms")).json()
        answer = await cluster.api.post(f"/api/v1/storms/{storm['id']}/approve", json={"by": "oncall"})
        assert answer.status_code == 200, answer.text
        await told(cluster)
    posts = [b["text"] for b in hook.bodies if b.get("text", "").startswith("Storm")]
    assert len(posts) == 2, posts
    assert posts[0].startswith("Storm on nodes running driver 580.95.05: 5 nodes faulting, held for one decision")
    assert posts[1].startswith("Storm on nodes running driver 580.95.05 approved by api:oncall")
    opened = next(b for b in hook.bodies if b.get("text", "").startswith("Storm on ") and "held for one" in b["text"])
    assert re.search(r"/storms/[0-9a-f-]{36}/approval/[A-Za-z0-9_-]{43}", json.dumps(opened["blocks"]))
