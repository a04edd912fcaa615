"""Controller settings, validated once at start-up.

Built in cli.py and passed down explicitly; nothing imports a global settings object. Every field can be
set from the environment with the `REMEDIATOR_` prefix (lists comma-separated) or from a YAML file given
with `--config`; the environment wins over the file.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import time, timedelta
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from remediator.domain.durations import parse_duration
from remediator.errors import ConfigError
from remediator.intake.normalize import EXPORTER_POD_PREFIXES

__all__ = [
    "BUNDLED_DIR",
    "QuarantineLimit",
    "Settings",
    "TcpPort",
    "is_loopback",
    "load_settings",
    "parse_origin",
    "parse_window",
]

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"

CommaList = Annotated[list[str], NoDecode]
TcpPort = Annotated[int, Field(ge=1, le=65535, description="a TCP port (1-65535)")]


def _split(value: object) -> object:
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return value


class QuarantineLimit:
    """`10` (nodes) or `5%` (of GPU nodes)."""

    def __init__(self, text: str) -> None:
        text = str(text).strip()
        self.text = text
        try:
            if text.endswith("%"):
                self.percent: float | None = float(text[:-1])
                self.count: int | None = None
                if not 0 < self.percent <= 100:
                    raise ValueError
            else:
                self.percent = None
                self.count = int(text)
                if self.count < 0:
                    raise ValueError
        except ValueError:
            raise ValueError(
                f"MAX_QUARANTINED_NODES must be a count like 10 or a percent like 5%, got {text!r}"
            ) from None

    def resolve(self, gpu_nodes: int) -> int:
        """The limit in nodes for a fleet of `gpu_nodes` GPU nodes (a percent never rounds to 0 nodes)."""
        if self.count is not None:
            return self.count
        assert self.percent is not None
        return max(1, int(gpu_nodes * self.percent / 100))

    def __str__(self) -> str:
        return self.text


class Settings(BaseSettings):
    """Everything the controller can be told. See docs/deployment.md for each key."""

    model_config = SettingsConfigDict(env_prefix="REMEDIATOR_", extra="ignore", validate_default=True)

    database_url: str = "sqlite+aiosqlite:///./remediator.db"
    rules_dir: Path = BUNDLED_DIR / "rules"
    playbooks_dir: Path = BUNDLED_DIR / "playbooks"
    webhook_token: CommaList = Field(default_factory=list)
    dry_run: bool | None = None  # None: plan-only exactly when no cluster credentials are found
    public_url: str = "http://127.0.0.1:8080"
    slack_webhook_url: str | None = None
    slack_signing_secret: str | None = None
    # Slack bot mode (instead of the incoming webhook): one message per remediation, edited in place.
    # Needs both the bot token (xoxb-..., scope chat:write) and the channel (name or id) to post in.
    slack_bot_token: str | None = None
    slack_channel: str | None = None
    slack_api_url: str = "https://slack.com/api"
    # Where the `response_url` of a Slack interaction may be followed: `host` (https on port 443) or
    # `scheme://host[:port]` (exactly that). Anything else a payload names is refused and logged.
    slack_response_url_hosts: CommaList = Field(default_factory=lambda: ["hooks.slack.com", "hooks.slack-gov.com"])
    # Key for CSRF form tokens; replicas behind one URL must share it (random per process when unset).
    secret_key: str | None = None
    notify_webhook_url: str | None = None
    # Notifications retry transient failures (connection errors, timeouts, 429, 5xx, Slack's transient
    # `ok: false` codes) for notify_budget per message, waiting exactly a Retry-After (one past the budget
    # ends the retries at once), else full-jitter backoff from notify_backoff capped at 8 s
    # (remediator/adapters/notifier.py). notify_attempts, when set, also caps the calls per message.
    notify_budget: timedelta = timedelta(minutes=10)
    notify_attempts: int | None = Field(default=None, ge=1, le=1000)
    notify_backoff: timedelta = timedelta(milliseconds=500)
    approver_header: str | None = None
    approvers: CommaList = Field(default_factory=list)
    approval_ttl: timedelta = timedelta(minutes=30)
    sidecar_port: TcpPort = 9410
    sidecar_token: str | None = None
    sidecar_url_template: str = "http://{ip}:{port}"
    kubeconfig: str | None = None
    max_quarantined_nodes: str = "10"
    quarantine_rate: int = 20
    quarantine_rate_window: timedelta = timedelta(minutes=10)
    flap_threshold: int = 3
    flap_window: timedelta = timedelta(hours=1)
    node_repeat_limit: int = 2
    node_repeat_window: timedelta = timedelta(days=7)
    # Shared-cause storms (remediator/domain/storms.py, docs/storms.md): analysed when more than storm_min_nodes nodes
    # faulted within storm_window; a cause explaining storm_hold_nodes or more of them with a Bonferroni-corrected
    # p-value under storm_p_value holds new remediations on nodes sharing it for one group approval.
    storm_hold: bool = True
    storm_window: timedelta = timedelta(minutes=15)
    storm_min_nodes: int = Field(default=3, ge=1)
    storm_hold_nodes: int = Field(default=5, ge=1)
    storm_p_value: float = Field(default=1e-6, gt=0, le=1)
    escalation_playbook: str = "reset-gpu"
    escalation_count: int = 3
    escalation_pods: int = 2
    escalation_window: timedelta = timedelta(hours=1)
    # The escalation ladder, per GPU (UUID) and node: a remediation whose GPU fails its validation gate, or
    # faults again within RECURRENCE_WINDOW of returning to service, goes to the next playbook here.
    escalation_ladder: CommaList = Field(default_factory=lambda: ["reset-gpu", "reboot-node", "rma-gpu"])
    recurrence_window: timedelta = timedelta(hours=24)
    maintenance_windows: CommaList = Field(default_factory=list)
    excluded_namespaces: CommaList = Field(default_factory=lambda: ["kube-system", "gpu-operator"])
    own_namespace: str | None = None
    node_label_precedence: CommaList = Field(
        default_factory=lambda: ["node", "kubernetes_node", "Hostname", "hostname", "instance"]
    )
    # Pods whose name starts with one of these are the exporter's own (dcgm-exporter scraped with
    # honorLabels false labels its series with its own pod): never taken for the workload of an alert.
    exporter_pod_prefixes: CommaList = Field(default_factory=lambda: list(EXPORTER_POD_PREFIXES))
    max_body_bytes: int = 1024 * 1024
    worker_poll_interval: timedelta = timedelta(milliseconds=500)
    worker_concurrency: int = 16
    # `serve` runs the worker (decisions, remediations, inventory watch) in a second process on the same
    # database, so webhooks and decisions each get a core (engine/worker_process.py). SQLite only: PostgreSQL
    # scales out by replicas instead. None ("auto", the default): `serve` turns it on for a SQLite file and
    # off for PostgreSQL and :memory: (engine.startup.resolve_worker_process); true or false wins.
    worker_process: bool | None = None
    lease_duration: timedelta = timedelta(seconds=30)
    held_recheck_interval: timedelta = timedelta(seconds=10)
    # Crash backoff: a remediation whose driver fails unexpectedly is claimed again only after
    # crash_backoff * 2**(crashes-1) (at most crash_backoff_max); after max_crashes in a row it is `failed`.
    max_crashes: int = Field(default=5, ge=1, le=1000)
    crash_backoff: timedelta = timedelta(seconds=2)
    crash_backoff_max: timedelta = timedelta(minutes=5)
    # A return-to-service gate whose verdict is unknown (node agent unreachable, 5xx, timeout, GPU or NVML
    # unreadable) keeps the node quarantined and looks again after gate_unknown_backoff_s, doubling up to
    # gate_unknown_backoff_max_s; it pages once and never climbs the escalation ladder.
    gate_unknown_backoff_s: float = Field(default=15.0, gt=0, le=3600)
    gate_unknown_backoff_max_s: float = Field(default=300.0, gt=0, le=86400)
    eviction_qps: float = 20.0
    kube_qps: float = 50.0
    # Transient failures of a dependency (Kubernetes API, node agent: connection errors, timeouts, 429, 5xx)
    # are retried for this many seconds per step (remediator/retrying.py: backoff with full jitter up to
    # transient_backoff_max_s, never sooner than Retry-After); then the remediation waits for the dependency
    # (state reason `waiting: ...`) and runs the step again after dependency_recheck_s. Never failed for it.
    transient_budget_s: float = Field(default=300.0, ge=0, le=86400)
    transient_backoff_max_s: float = Field(default=5.0, ge=0.5, le=300)
    dependency_recheck_s: float = Field(default=15.0, gt=0, le=3600)
    # A remediation waiting for its node's reboot (await_reboot) looks again as soon as the node watch sees the
    # node Ready from a new boot (engine/hand_changes.py); false leaves it to the step's own poll (30 s).
    reboot_watch_wake: bool = True
    replica_id: str | None = None
    allow_multiple_replicas: bool = False
    log_level: str = "INFO"
    # `text` (one readable line per record) or `json` (one JSON object per line: ts, level, logger, message,
    # and remediation, node, gpu, rule when known). Third-party INFO chatter stays off below DEBUG.
    log_format: Literal["text", "json"] = "text"
    # Links on the web UI (docs/ui.md). Alertmanager's base URL (a prefilled silence per remediation and
    # per ignored alert); Grafana's base URL and the dashboard path for a node or GPU (`var-node`,
    # `var-gpu` are appended). Unset: the link is not shown.
    alertmanager_url: str | None = None
    # Where the UI's state badges link (`{docs_url}/operations.md#state-<state>`, the runbook): the default
    # `/docs` is served by the controller itself from docs_dir (offline); or a git host's docs/ folder URL.
    docs_url: str = "/docs"
    docs_dir: str | None = None  # the docs/ folder /docs serves (default: the checkout's beside the package, else the
    # copy `pip install .` installs in <prefix>/share/gpu-remediator/docs)
    grafana_url: str | None = None
    grafana_dashboard: str = "/d/dcgm-exporter/nvidia-dcgm-exporter-dashboard"
    # How often the controller looks for edited definition files (0 turns the watcher off; SIGHUP and
    # POST /api/v1/definitions/reload still work). Definition sets kept in memory for GET /definitions/{v}.
    definitions_watch_interval: timedelta = timedelta(seconds=2)
    definitions_history: int = Field(default=20, ge=1, le=1000)
    # A definition file larger than this is refused unread; a load (start-up or reload) that takes longer
    # than definitions_load_timeout is refused and the set in force stays.
    definition_max_file_bytes: int = Field(default=1024 * 1024, ge=1024)
    definitions_load_timeout: timedelta = timedelta(seconds=30)
    # HMAC-SHA256 key of the audit hash chain and its checkpoints; the database never holds it.
    # AUDIT_KEY_FILE: a file holding the key (a mounted Secret). Without a key the chain is plain SHA-256
    # (whoever can write the database can rewrite it undetected) and `serve` refuses to bind beyond loopback.
    audit_key: str | None = Field(default=None, repr=False)
    audit_key_file: Path | None = None
    # Delete processed alerts / audit events older than this (unset: keep everything). Pruning audit
    # events first writes a signed checkpoint, so what remains still verifies.
    alert_retention: timedelta | None = None
    audit_retention: timedelta | None = None
    # How often the worker prunes (when a retention is set) and logs the audit head (`seq:hash`).
    prune_interval: timedelta = timedelta(hours=1)
    audit_head_interval: timedelta = timedelta(minutes=10)
    # Web UI sign-in (docs/approvals.md): `name:token` pairs for the /login page; the key of the session
    # cookie (else derived from SECRET_KEY); how long a session lasts; the peers (IPs or CIDRs) whose
    # APPROVER_HEADER is believed (empty: no peer, and `serve` refuses to start with APPROVER_HEADER set);
    # `required` asks for sign-in on loopback binds too.
    ui_tokens: CommaList = Field(default_factory=list)
    session_secret: str | None = None
    session_ttl: timedelta = timedelta(hours=12)
    trusted_proxies: CommaList = Field(default_factory=list)
    ui_sign_in: Literal["auto", "required"] = "auto"
    # Failed /login attempts (api/sign_in_limit.py): per account (the typed name) and per client address,
    # so many within the window lock that key for one window, doubling per further lockout up to the maximum.
    sign_in_account_failures: int = Field(default=5, ge=1, le=10_000)
    sign_in_account_window: timedelta = timedelta(minutes=5)
    sign_in_client_failures: int = Field(default=20, ge=1, le=10_000)
    sign_in_client_window: timedelta = timedelta(minutes=1)
    sign_in_lockout_max: timedelta = timedelta(hours=1)

    @field_validator("ui_tokens", "trusted_proxies", mode="before")
    @classmethod
    def _sign_in_lists(cls, value: object) -> object:
        return _split(value)

    @field_validator("slack_response_url_hosts", mode="before")
    @classmethod
    def _response_url_hosts_list(cls, value: object) -> object:
        return _split(value)

    @field_validator("slack_response_url_hosts")
    @classmethod
    def _response_url_hosts(cls, value: list[str]) -> list[str]:
        for item in value:
            parse_origin(item, "SLACK_RESPONSE_URL_HOSTS")
        return value

    @field_validator("notify_budget", mode="before")
    @classmethod
    def _notify_budget(cls, value: object) -> timedelta:
        duration = parse_duration(value)
        if duration > timedelta(days=1):
            raise ValueError("NOTIFY_BUDGET is at most 1d (0 sends each message once, without retries)")
        return duration

    @field_validator("worker_process", mode="before")
    @classmethod
    def _worker_process(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in ("", "auto"):
            return None  # auto: on for a SQLite file, off otherwise
        return value

    @field_validator("session_ttl", mode="before")
    @classmethod
    def _session_ttl(cls, value: object) -> timedelta:
        return parse_duration(value)

    @field_validator("sign_in_account_window", "sign_in_client_window", "sign_in_lockout_max", mode="before")
    @classmethod
    def _sign_in_windows(cls, value: object) -> timedelta:
        duration = parse_duration(value)
        if duration.total_seconds() < 1:
            raise ValueError("sign-in limit windows and the maximum lockout are at least 1s")
        return duration

    @field_validator("ui_tokens")
    @classmethod
    def _ui_tokens(cls, value: list[str]) -> list[str]:
        for item in value:
            name, _, token = item.partition(":")
            name, token = name.strip(), token.strip()  # as SignIn uses them: the length that counts is this one
            if not name or not token or len(name) > 100 or not name.isprintable():
                raise ValueError("UI_TOKENS entries are `name:token` (a name of at most 100 printable characters)")
            if len(token) < 16:
                raise ValueError(f"UI_TOKENS: the token of {name!r} is shorter than 16 characters")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"TRUSTED_PROXIES: {item!r} is not an IP address or CIDR network") from None
        return value

    @field_validator(
        "webhook_token", "approvers", "excluded_namespaces", "node_label_precedence", "maintenance_windows",
        "exporter_pod_prefixes", "escalation_ladder", mode="before",
    )
    @classmethod
    def _comma_lists(cls, value: object) -> object:
        return _split(value)

    @field_validator(
        "approval_ttl", "worker_poll_interval", "lease_duration", "held_recheck_interval",
        "crash_backoff", "crash_backoff_max",
        "quarantine_rate_window", "flap_window",
        "node_repeat_window", "storm_window", "escalation_window", "recurrence_window", "notify_backoff",
        "definitions_watch_interval",
        "definitions_load_timeout", mode="before",
    )
    @classmethod
    def _durations(cls, value: object) -> timedelta:
        return parse_duration(value)

    @field_validator("alert_retention", "audit_retention", "prune_interval", "audit_head_interval", mode="before")
    @classmethod
    def _optional_durations(cls, value: object) -> timedelta | None:
        return None if value is None or value == "" else parse_duration(value)

    @field_validator("audit_key")
    @classmethod
    def _audit_key(cls, value: str | None) -> str | None:
        if value and len(value.encode()) < 16:
            raise ValueError("AUDIT_KEY must be at least 16 bytes (e.g. `openssl rand -hex 32`)")
        return value or None

    @field_validator("max_quarantined_nodes")
    @classmethod
    def _limit(cls, value: str) -> str:
        QuarantineLimit(value)
        return value

    @field_validator("maintenance_windows")
    @classmethod
    def _windows(cls, value: list[str]) -> list[str]:
        for item in value:
            parse_window(item)
        return value

    @property
    def quarantine_limit(self) -> QuarantineLimit:
        return QuarantineLimit(self.max_quarantined_nodes)

    @property
    def slack_response_origins(self) -> frozenset[tuple[str, str, int]]:
        """SLACK_RESPONSE_URL_HOSTS as (scheme, host, port) triples."""
        return frozenset(parse_origin(item, "SLACK_RESPONSE_URL_HOSTS") for item in self.slack_response_url_hosts)

    @property
    def windows(self) -> list[tuple[time, time, str]]:
        return [parse_window(item) for item in self.maintenance_windows]

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    def audit_key_bytes(self) -> bytes | None:
        """The audit chain key: AUDIT_KEY, else the contents of AUDIT_KEY_FILE (trailing newline dropped)."""
        if self.audit_key:
            return self.audit_key.encode()
        if self.audit_key_file is None:
            return None
        try:
            key = self.audit_key_file.read_bytes().rstrip(b"\r\n")
        except OSError as exc:
            raise ConfigError(f"AUDIT_KEY_FILE {self.audit_key_file}: {exc.strerror or exc}") from exc
        if len(key) < 16:
            raise ConfigError(f"AUDIT_KEY_FILE {self.audit_key_file}: the key must be at least 16 bytes")
        return key


_ORIGIN = re.compile(
    r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)"
    r"(?::(?P<port>\d{1,5}))?/?$"
)


def parse_origin(text: str, setting: str) -> tuple[str, str, int]:
    """`hooks.slack.com` -> ("https", "hooks.slack.com", 443); `http://127.0.0.1:8123` -> exactly that.

    A bare host means https on its default port; http must be written out. No path, user or query.
    """
    m = _ORIGIN.match(text.strip())
    if not m:
        raise ValueError(f"{setting}: {text!r} is not a host or an origin like https://host[:port]")
    scheme = (m.group("scheme") or "https").lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"{setting}: {text!r}: only http and https are allowed")
    port = int(m.group("port")) if m.group("port") else (443 if scheme == "https" else 80)
    if not 1 <= port <= 65535:
        raise ValueError(f"{setting}: {text!r}: the port must be 1-65535")
    return scheme, m.group("host").strip("[]").lower(), port


_WINDOW = re.compile(r"^(?:(hold|allow)\s+)?(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})$")


def parse_window(text: str) -> tuple[time, time, str]:
    """`hold 22:00-04:00` (playbooks wait inside) or `allow 01:00-05:00` (playbooks run only inside), UTC."""
    m = _WINDOW.match(text.strip())
    if not m:
        raise ValueError(f"maintenance window {text!r}: use '[hold|allow] HH:MM-HH:MM' (UTC)")
    mode = m.group(1) or "hold"
    h1, m1, h2, m2 = (int(g) for g in m.groups()[1:])
    if h1 > 23 or h2 > 23 or m1 > 59 or m2 > 59:
        raise ValueError(f"maintenance window {text!r}: hours 0-23, minutes 0-59")
    return time(h1, m1), time(h2, m2), mode


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_settings(config_file: Path | None = None, **overrides: object) -> Settings:
    """Settings from an optional YAML file, then the environment, then explicit overrides."""
    file_values: dict[str, object] = {}
    if config_file is not None:
        try:
            loaded = yaml.safe_load(config_file.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{config_file}: cannot read settings: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{config_file}: settings file must be a mapping of keys to values")
        file_values = {str(k).lower().removeprefix("remediator_"): v for k, v in (loaded or {}).items()}
    try:
        env_settings = Settings()
        merged = {**file_values, **env_settings.model_dump(exclude_unset=True), **overrides}
        return Settings(**merged) if merged else env_settings
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']).upper() or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from exc
    except ValueError as exc:
        raise ConfigError(f"invalid settings: {' '.join(str(exc).split())}") from exc
