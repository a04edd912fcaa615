"""Assemble a Runtime from settings: database (migrated), definitions, actions, cluster and peers.

Used by the app factory, `remediator simulate` and the demo, so all of them see the same wiring.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from remediator.actions.base import AnyAction
from remediator.actions.registry import default_registry
from remediator.adapters.notifier import open_channels
from remediator.adapters.sidecar import SidecarClient
from remediator.definitions import DefinitionSet, load_definitions
from remediator.engine.mutation_audit import audit_recorder
from remediator.engine.notifications import NotificationService, SlackMessageStore
from remediator.engine.runtime import DefinitionsHolder, Runtime, replica_id
from remediator.process.metrics import Metrics
from remediator.settings import Settings
from remediator.store.db import StoreEngine, make_engine, make_sessionmaker, upgrade
from remediator.store.repository import Repository

if TYPE_CHECKING:
    from remediator.adapters.kube import KubeAdapter

__all__ = ["action_params", "build_runtime", "close_runtime", "load_defs"]

log = logging.getLogger(__name__)


def action_params(actions: dict[str, AnyAction]) -> dict[str, type]:
    return {name: action.Params for name, action in actions.items()}


def load_defs(settings: Settings, actions: dict[str, AnyAction]) -> DefinitionSet:
    return load_definitions(
        settings.rules_dir, settings.playbooks_dir, action_params(actions),
        max_file_bytes=settings.definition_max_file_bytes,
    )


async def build_runtime(
    settings: Settings,
    *,
    kube: KubeAdapter | None = None,
    connect_kube: bool = True,
    metrics: Metrics | None = None,
    migrate: bool = True,
) -> tuple[Runtime, StoreEngine]:
    """A ready Runtime plus its database engine (the caller disposes of it)."""
    if migrate:
        await upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    repo = Repository(make_sessionmaker(engine))
    repo.audit_key = settings.audit_key_bytes()
    if repo.audit_key is None:
        log.warning("no REMEDIATOR_AUDIT_KEY: the audit chain is plain SHA-256, so whoever can write the database "
                    "can rewrite it undetected")
    actions = default_registry()
    defs = load_defs(settings, actions)
    if kube is None and connect_kube:
        from remediator.adapters.kube import connect

        kube = await connect(settings)
    rt = Runtime(
        settings=settings, repo=repo, definitions=DefinitionsHolder(defs), actions=actions,
        metrics=metrics or Metrics(), owner=replica_id(settings), kube=kube,
    )
    rt.metrics.watch_database(lambda: repo.health.up, repo.health.down_for)
    repo.watch_spool(lambda problem: rt.metrics.intake_spool_problems.labels(problem=problem).inc())
    if kube is not None:  # sidecars are found through Node InternalIPs, so only with a cluster
        rt.sidecar = SidecarClient.for_settings(settings)
        rt.sidecar.recorder = audit_recorder(repo)
    if kube is not None:
        kube.recorder = audit_recorder(repo)
    if bool(settings.slack_bot_token) != bool(settings.slack_channel):
        log.warning("Slack bot mode needs both REMEDIATOR_SLACK_BOT_TOKEN and REMEDIATOR_SLACK_CHANNEL; "
                    "it stays off")
    elif settings.slack_bot_token and settings.slack_webhook_url:
        log.warning("REMEDIATOR_SLACK_BOT_TOKEN is set: Slack messages go through the bot, "
                    "REMEDIATOR_SLACK_WEBHOOK_URL is not used")
    channels, close_channels = open_channels(
        settings.slack_webhook_url, settings.notify_webhook_url, attempts=settings.notify_attempts,
        backoff_seconds=settings.notify_backoff.total_seconds(), budget_seconds=settings.notify_budget.total_seconds(),
        slack_bot_token=settings.slack_bot_token,
        slack_channel=settings.slack_channel, slack_api_url=settings.slack_api_url,
        slack_threads=SlackMessageStore(repo),
    )
    rt.notifier = NotificationService(channels, repo, rt.metrics, settings, on_close=close_channels)
    rt.metrics.plan_only.set(1 if rt.plan_only else 0)
    if rt.plan_only:
        log.warning(
            "PLAN-ONLY mode: %s; remediations are planned and recorded, nothing in the cluster is changed",
            "no cluster credentials found" if kube is None else "REMEDIATOR_DRY_RUN is set",
        )
    return rt, engine


async def close_runtime(rt: Runtime, engine: StoreEngine) -> None:
    """Close what `build_runtime` opened: notification channels, sidecar and cluster clients, the engine."""
    if rt.notifier is not None:
        await rt.notifier.aclose()
    if rt.sidecar is not None:
        await rt.sidecar.aclose()
    if rt.kube is not None:
        await rt.kube.close()
    await engine.dispose()
