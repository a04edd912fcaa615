"""The controller's only door to the Kubernetes API (the official client's async flavour, `kubernetes.aio`).

Objects come back as the JSON the apiserver sent (camelCase dicts), so actions read exactly the fields a
real server returns and tests can compare them with the fake server's objects. Every failure leaves this
module as a `remediator.errors` class: the status code picks the class, 429 and 5xx carry Retry-After, and
connection problems become ServiceUnavailable. A token bucket keeps the controller under `kube_qps`.
Every node, object and namespace name is checked against the API server's grammar (remediator.names)
before it becomes part of a path or a field selector: a bad one is refused here as Invalid, unsent.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pydantic
from kubernetes.aio import client, config
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.config.config_exception import ConfigException

from remediator.adapters.mutations import Mutation, MutationRecorder
from remediator.errors import (
    ActionError,
    ConfigError,
    Invalid,
    NotSupported,
    ServiceUnavailable,
    TemporaryError,
    error_for_status,
)
from remediator.names import escape_field_selector_value, namespace_problem, object_name_problem
from remediator.settings import Settings

__all__ = ["FIELD_MANAGER", "KubeAdapter", "KubeObject", "Mutation", "MutationRecorder", "TokenBucket", "connect"]

FIELD_MANAGER = "remediator"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
LIST_PAGE = 500

KubeObject = dict[str, Any]

# kind -> (API group attribute, the snake_case resource in the client's method names)
_NAMESPACED_KINDS: dict[str, tuple[str, str]] = {
    "Pod": ("core", "pod"),
    "ResourceQuota": ("core", "resource_quota"),
    "ReplicationController": ("core", "replication_controller"),
    "ReplicaSet": ("apps", "replica_set"),
    "Deployment": ("apps", "deployment"),
    "StatefulSet": ("apps", "stateful_set"),
    "DaemonSet": ("apps", "daemon_set"),
    "Job": ("batch", "job"),
    "CronJob": ("batch", "cron_job"),
    "PodDisruptionBudget": ("policy", "pod_disruption_budget"),
}

# kinds whose `scale` subresource the controller may read and patch -> snake_case resource
_SCALABLE_KINDS: dict[str, str] = {"Deployment": "deployment", "StatefulSet": "stateful_set"}


class TokenBucket:
    """At most `rate` acquisitions a second on average, bursts up to `burst`; time from the event loop.

    Kept rather than a library: it is the same client-side QPS/burst limiter client-go and kubectl apply to an
    API server (20 lines), it reads the event loop's clock so tests drive it without sleeping, and the
    maintained asyncio limiters (aiolimiter) implement a leaky bucket without a burst parameter.
    """

    def __init__(self, rate: float, burst: int | None = None) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = float(burst if burst is not None else max(1, int(rate)))
        self._tokens = self.burst
        self._updated: float | None = None
        self._lock = asyncio.Lock()

    def _refill(self, now: float) -> None:
        if self._updated is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
        self._updated = now

    async def acquire(self) -> None:
        async with self._lock:
            loop = asyncio.get_running_loop()
            self._refill(loop.time())
            if self._tokens < 1:
                await asyncio.sleep((1 - self._tokens) / self.rate)
                self._refill(loop.time())
            self._tokens -= 1


def _status_error(status: int, body: bytes, headers: Mapping[str, str]) -> ActionError:
    try:
        document = json.loads(body) if body else {}
    except ValueError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    message = str(document.get("message") or body[:200].decode(errors="replace") or f"HTTP {status}")
    error = error_for_status(status, message, details=document or None)
    if isinstance(error, TemporaryError):
        error.retry_after = _retry_after(headers, document)
    return error


def _retry_after(headers: Mapping[str, str], document: Mapping[str, Any]) -> float | None:
    raw = headers.get("Retry-After")
    if raw is None:
        raw = (document.get("details") or {}).get("retryAfterSeconds")
    try:
        seconds = float(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and seconds > 0 else None

_WRITE_VERBS = ("patch", "create", "delete", "replace")


def _name(name: str, what: str) -> str:
    """`name` if it is a valid object name; else Invalid, before any request is built."""
    problem = object_name_problem(str(name), what)
    if problem is not None:
        raise Invalid(f"refused before calling the Kubernetes API: {problem}", details={"field": what})
    return name


def _namespace(namespace: str) -> str:
    problem = namespace_problem(str(namespace))
    if problem is not None:
        raise Invalid(f"refused before calling the Kubernetes API: {problem}", details={"field": "namespace"})
    return namespace


def _describe_call(method_name: str, args: tuple[Any, ...]) -> tuple[str, str, str | None, str] | None:
    """(verb, resource, namespace, name) of a writing client method, None for reads."""
    base = method_name.removesuffix("_without_preload_content")
    verb, _, rest = base.partition("_")
    if verb not in _WRITE_VERBS:
        return None
    namespaced = rest.startswith("namespaced_")
    resource = rest.removeprefix("namespaced_")
    name = str(args[0]) if args else ""
    namespace = str(args[1]) if namespaced and len(args) > 1 else None
    return verb, resource, namespace, name


class KubeAdapter:
    """Typed async calls the actions need. Build it with `connect(settings)` or from an ApiClient.

    Set `recorder` to be told of every write (verb, object, outcome); the engine audits them.
    """

    def __init__(self, api_client: client.ApiClient, *, qps: float = 50.0, burst: int | None = None) -> None:
        self.api_client = api_client
        self.recorder: MutationRecorder | None = None
        self._bucket = TokenBucket(qps, burst)
        self._apis: dict[str, Any] = {
            "core": client.CoreV1Api(api_client),
            "apps": client.AppsV1Api(api_client),
            "batch": client.BatchV1Api(api_client),
            "policy": client.PolicyV1Api(api_client),
        }

    @classmethod
    def for_host(cls, host: str, *, qps: float = 50.0) -> KubeAdapter:
        """An adapter for an unauthenticated apiserver URL (tests, kubectl proxy)."""
        configuration = client.Configuration(host=host)
        return cls(client.ApiClient(configuration), qps=qps)

    async def close(self) -> None:
        await self.api_client.close()  # type: ignore[no-untyped-call]

    async def _call(self, method: Callable[..., Awaitable[Any]], *args: Any, **options: Any) -> Any:
        write = _describe_call(getattr(method, "__name__", ""), args) if self.recorder else None
        if write is None:
            return await self._send(method, *args, **options)
        try:
            result = await self._send(method, *args, **options)
        except ActionError as exc:
            await self._record(write, exc.status or 0, exc.message)
            raise
        await self._record(write, 200, None)
        return result

    async def _record(self, write: tuple[str, str, str | None, str], status: int, error: str | None) -> None:
        if self.recorder is not None:
            verb, resource, namespace, name = write
            await self.recorder(Mutation(verb, resource, namespace, name, status, error))

    async def _send(self, method: Callable[..., Awaitable[Any]], *args: Any, **options: Any) -> Any:
        await self._bucket.acquire()
        try:
            response = await method(*args, **options)
            try:
                body = await response.read()
                status, headers = int(response.status), dict(response.headers)
            finally:
                response.release()
        except ApiException as exc:  # raised by the client itself, before or without an HTTP answer
            raise error_for_status(exc.status or 0, f"kubernetes client: {exc.reason}") from exc
        except pydantic.ValidationError as exc:
            raise Invalid(f"kubernetes client refused the request: {exc}") from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ServiceUnavailable(f"cannot reach the Kubernetes API: {exc!r}") from exc
        if status >= 400:
            raise _status_error(status, body, headers)
        return json.loads(body) if body else {}

    def _method(self, group: str, name: str) -> Callable[..., Awaitable[Any]]:
        method: Callable[..., Awaitable[Any]] = getattr(self._apis[group], f"{name}_without_preload_content")
        return method

    async def _list(self, group: str, name: str, *args: Any, **selectors: str | None) -> list[KubeObject]:
        items: list[KubeObject] = []
        token: str | None = None
        while True:
            page = await self._call(
                self._method(group, name),
                *args,
                limit=LIST_PAGE,
                _continue=token,
                **{k: v for k, v in selectors.items() if v},
            )
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    # ------------------------------------------------------------------ nodes

    async def get_node(self, name: str) -> KubeObject:
        result: KubeObject = await self._call(self._method("core", "read_node"), _name(name, "node name"))
        return result

    async def list_nodes(self, label_selector: str | None = None) -> list[KubeObject]:
        return await self._list("core", "list_node", label_selector=label_selector)

    async def node_pages(self, page_size: int = LIST_PAGE) -> AsyncIterator[tuple[list[KubeObject], str]]:
        """Every node, one page of `page_size` at a time, with the list's resourceVersion (for a watch).

        Pages are yielded, not gathered, so a caller that keeps a few fields of each node never holds the
        whole fleet's Node objects at once.
        """
        token: str | None = None
        while True:
            page = await self._call(self._method("core", "list_node"), limit=page_size, _continue=token)
            metadata = page.get("metadata") or {}
            yield page.get("items") or [], str(metadata.get("resourceVersion") or "")
            token = metadata.get("continue")
            if not token:
                return

    async def watch_nodes(self, resource_version: str, *, timeout_seconds: int) -> AsyncIterator[KubeObject]:
        """Watch events (`{"type", "object"}`) on nodes from `resource_version`, bookmarks on, until the
        server ends the stream (after about `timeout_seconds`). An ERROR event (410 Expired among them)
        is yielded as it came; an HTTP error status raises as every other call does."""
        await self._bucket.acquire()
        try:
            response = await self._method("core", "list_node")(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _request_timeout=timeout_seconds + 30,
            )
        except ApiException as exc:
            raise error_for_status(exc.status or 0, f"kubernetes client: {exc.reason}") from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ServiceUnavailable(f"cannot reach the Kubernetes API: {exc!r}") from exc
        try:
            status = int(response.status)
            if status >= 400:
                raise _status_error(status, await response.read(), dict(response.headers))
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line, buffer = buffer[:end], buffer[end + 1 :]
                    if line.strip():
                        yield json.loads(line)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ServiceUnavailable(f"node watch interrupted: {exc!r}") from exc
        except ValueError as exc:
            raise ServiceUnavailable(f"node watch sent a line that is not JSON: {exc}") from exc
        finally:
            response.release()

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """Strategic merge patch: maps merge (null deletes a key); Node.spec.taints is replaced whole."""
        result: KubeObject = await self._call(
            self._method("core", "patch_node"),
            _name(name, "node name"),
            dict(patch),
            field_manager=FIELD_MANAGER,
            _content_type=STRATEGIC_MERGE,
        )
        return result

    async def patch_node_status(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        """Strategic merge patch of the `nodes/status` subresource: only `status` changes (conditions merge
        by `type`, so other writers' conditions stay); `metadata.resourceVersion` in the patch guards it."""
        result: KubeObject = await self._call(
            self._method("core", "patch_node_status"),
            name,
            dict(patch),
            field_manager=FIELD_MANAGER,
            _content_type=STRATEGIC_MERGE,
        )
        return result

    # ------------------------------------------------------------------ pods

    async def get_pod(self, namespace: str, name: str) -> KubeObject:
        result: KubeObject = await self._call(
            self._method("core", "read_namespaced_pod"), _name(name, "pod name"), _namespace(namespace)
        )
        return result

    async def list_pods(
        self,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> list[KubeObject]:
        if namespace is None:
            return await self._list(
                "core",
                "list_pod_for_all_namespaces",
                field_selector=field_selector,
                label_selector=label_selector,
            )
        return await self._list(
            "core",
            "list_namespaced_pod",
            _namespace(namespace),
            field_selector=field_selector,
            label_selector=label_selector,
        )

    async def list_pods_on_node(self, node: str) -> list[KubeObject]:
        value = escape_field_selector_value(_name(node, "node name"))
        return await self.list_pods(field_selector=f"spec.nodeName={value}")

    async def evict_pod(
        self, namespace: str, name: str, *, grace_period_seconds: int | None = None, uid: str | None = None
    ) -> None:
        """policy/v1 Eviction; with `uid` the server refuses (409) to evict a same-name replacement."""
        _name(name, "pod name")
        _namespace(namespace)
        options: dict[str, Any] = {}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        body = client.V1Eviction.model_validate(
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": options or None,
            }
        )
        await self._call(self._method("core", "create_namespaced_pod_eviction"), name, namespace, body)

    # ------------------------------------------------------------------ events

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> KubeObject:
        """Create a core/v1 Event (the body as the API spells it, camelCase)."""
        body = client.CoreV1Event.model_validate(dict(event))
        result: KubeObject = await self._call(
            self._method("core", "create_namespaced_event"), _namespace(namespace), body, field_manager=FIELD_MANAGER
        )
        return result

    # ------------------------------------------------------------------ namespaced objects

    def _kind(self, kind: str) -> tuple[str, str]:
        try:
            return _NAMESPACED_KINDS[kind]
        except KeyError:
            raise NotSupported(f"the controller does not read {kind} objects") from None

    async def get_object(self, kind: str, namespace: str, name: str) -> KubeObject:
        group, resource = self._kind(kind)
        result: KubeObject = await self._call(
            self._method(group, f"read_namespaced_{resource}"), _name(name, f"{kind} name"), _namespace(namespace)
        )
        return result

    async def patch_object(
        self, kind: str, namespace: str, name: str, patch: Mapping[str, Any], *, merge: bool = False
    ) -> KubeObject:
        """Strategic merge patch (or a JSON merge patch with merge=True) with field manager "remediator"."""
        group, resource = self._kind(kind)
        result: KubeObject = await self._call(
            self._method(group, f"patch_namespaced_{resource}"),
            _name(name, f"{kind} name"),
            _namespace(namespace),
            dict(patch),
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH if merge else STRATEGIC_MERGE,
        )
        return result

    async def get_owner(self, namespace: str, owner: Mapping[str, Any]) -> KubeObject:
        """The object an ownerReference points to (a Node for mirror pods)."""
        kind, name = str(owner.get("kind", "")), str(owner.get("name", ""))
        if kind == "Node":
            return await self.get_node(name)
        return await self.get_object(kind, namespace, name)

    async def get_deployment(self, namespace: str, name: str) -> KubeObject:
        return await self.get_object("Deployment", namespace, name)

    async def patch_deployment(self, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        return await self.patch_object("Deployment", namespace, name, patch)

    async def get_job(self, namespace: str, name: str) -> KubeObject:
        return await self.get_object("Job", namespace, name)

    async def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        return await self.patch_object("Job", namespace, name, patch)

    def _scale_resource(self, kind: str) -> str:
        if kind not in _SCALABLE_KINDS:
            raise NotSupported(f"the controller scales Deployments and StatefulSets, not {kind}")
        return _SCALABLE_KINDS[kind]

    async def get_scale(self, kind: str, namespace: str, name: str) -> KubeObject:
        """The autoscaling/v1 Scale of a Deployment or StatefulSet (the `scale` subresource)."""
        resource = self._scale_resource(kind)
        result: KubeObject = await self._call(
            self._method("apps", f"read_namespaced_{resource}_scale"),
            _name(name, f"{kind} name"),
            _namespace(namespace),
        )
        return result

    async def patch_scale(
        self, kind: str, namespace: str, name: str, replicas: int, *, resource_version: str | None = None
    ) -> KubeObject:
        """Set spec.replicas through the `scale` subresource (JSON merge patch, optionally guarded by RV)."""
        resource = self._scale_resource(kind)
        patch: dict[str, Any] = {"spec": {"replicas": replicas}}
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        result: KubeObject = await self._call(
            self._method("apps", f"patch_namespaced_{resource}_scale"),
            _name(name, f"{kind} name"),
            _namespace(namespace),
            patch,
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
        )
        return result

    async def get_resource_quota(self, namespace: str, name: str) -> KubeObject:
        return await self.get_object("ResourceQuota", namespace, name)

    async def list_resource_quotas(self, namespace: str) -> list[KubeObject]:
        return await self._list("core", "list_namespaced_resource_quota", _namespace(namespace))

    async def patch_resource_quota(self, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        return await self.patch_object("ResourceQuota", namespace, name, patch)

    # ------------------------------------------------------------------ namespaces

    async def get_namespace(self, name: str) -> KubeObject:
        result: KubeObject = await self._call(self._method("core", "read_namespace"), _namespace(name))
        return result

    async def patch_namespace(self, name: str, patch: Mapping[str, Any]) -> KubeObject:
        result: KubeObject = await self._call(
            self._method("core", "patch_namespace"),
            _namespace(name),
            dict(patch),
            field_manager=FIELD_MANAGER,
            _content_type=STRATEGIC_MERGE,
        )
        return result


def _kubeconfig_path(settings: Settings) -> str | None:
    if settings.kubeconfig:
        return settings.kubeconfig
    env = os.environ.get("KUBECONFIG")
    if env:
        return env
    default = Path.home() / ".kube" / "config"
    return str(default) if default.is_file() else None


async def connect(settings: Settings) -> KubeAdapter | None:
    """Kubeconfig (settings, $KUBECONFIG, ~/.kube/config), else in-cluster, else None (plan-only)."""
    configuration = client.Configuration()
    path = _kubeconfig_path(settings)
    try:
        if path is not None:
            await config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path, client_configuration=configuration
            )
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            return None
    except (ConfigException, OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot load Kubernetes credentials from {path or 'the in-cluster service account'}: {exc}"
        ) from exc
    return KubeAdapter(client.ApiClient(configuration), qps=settings.kube_qps)
