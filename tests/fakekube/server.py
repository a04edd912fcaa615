"""A strict fake Kubernetes apiserver: kmock's KubernetesEmulator served over real HTTP on 127.0.0.1.

kmock gives the HTTP server, request parsing, discovery, Status rendering and the object store with
history. This module replaces the emulator's lenient write path with the rules of a real apiserver:
resourceVersion on every write (409 for stale, 422 for a PUT without one), validation (422), patch
semantics by content type, selectors on lists, the pods/eviction subresource with PodDisruptionBudgets
(429, 500 for two budgets), graceful pod deletion that lingers until the grace period passes on a clock the
tests control, optional controllers that replace evicted pods, and watches (bookmarks, 410 Gone after
compaction). Every request is recorded, with the bytes its response carried.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import parsing as kmock_parsing
from kmock._internal.rendering import Request

from remediator.kube.kinds import Grant, cluster_grants
from tests.fakekube import builders
from tests.fakekube.copies import deep_copy
from tests.fakekube.disruption import compute_budget, is_healthy, pdb_selects
from tests.fakekube.faults import Faults
from tests.fakekube.managed_fields import manager_of, update_managed_fields
from tests.fakekube.patching import (
    PatchError,
    UnsupportedPatch,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)
from tests.fakekube.selectors import SelectorError, parse_field_selector, parse_label_selector
from tests.fakekube.store import RESOURCES, Change, FakeClock, ResourceType, Store, resource_type
from tests.fakekube.validation import (
    check_annotations,
    check_event,
    check_labels,
    check_node_taints,
    check_object_name,
    node_condition_time_problem,
)

__all__ = ["CONTROLLER_GRANTS", "CONTROLLER_USER", "Call", "FakeKube"]

# What the controller's ClusterRole grants (deploy/base/rbac.yaml is rendered from the same table): the
# fake answers 403 to anything else, as a cluster would, unless it is made with grants=None (an admin).
CONTROLLER_GRANTS: frozenset[Grant] = frozenset(cluster_grants())
CONTROLLER_USER = "system:serviceaccount:gpu-remediator:gpu-remediator"

TERMINAL_PHASES = ("Succeeded", "Failed")
MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")


def _error(
    status: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=status, reason=reason, message=message, details=dict(details or {}))


def not_found(rt: ResourceType, name: str) -> kmock.KubernetesError:
    return _error(
        404,
        "NotFound",
        f'{rt.qualified()} "{name}" not found',
        {"name": name, "group": rt.group, "kind": rt.plural},
    )


def conflict(rt: ResourceType, name: str, message: str) -> kmock.KubernetesError:
    return _error(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified()} "{name}": {message}',
        {"name": name, "group": rt.group, "kind": rt.plural},
    )


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str]]) -> kmock.KubernetesError:
    text = ", ".join(f"{f}: {m}" for f, m in causes)
    return _error(
        422,
        "Invalid",
        f'{rt.kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [{"reason": "FieldValueInvalid", "field": f, "message": m} for f, m in causes],
        },
    )


def bad_request(message: str) -> kmock.KubernetesError:
    return _error(400, "BadRequest", message)


@dataclass
class Call:
    """One request as the fake saw it."""

    seq: int
    verb: str  # get list watch create update patch delete evict
    method: str
    path: str
    plural: str | None
    namespace: str | None
    name: str | None
    subresource: str | None
    params: dict[str, str]
    body: Any
    content_type: str
    time: float  # fake clock
    status: int = 0
    at: float = 0.0  # real time it arrived (time.monotonic()), for Retry-After checks
    injected: bool = False  # answered by a scheduled fault (tests/fakekube/faults.py), not by the store
    uid: str | None = None  # uid of the object acted on, when it existed
    bytes: int = 0  # response body bytes sent (for a watch: every event so far)
    manager: str = ""  # the field manager a write is made as (`fieldManager`, else the User-Agent's product)
    user: str = ""  # who made the request (its bearer token in `FakeKube.users`), as an apiserver's audit log says

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class _Rule:
    verb: str
    plural: str
    name: str | None
    times: int
    action: Callable[[Call], Any]
    fired: int = field(default=0)

    def wants(self, call: Call) -> bool:
        return (
            self.fired < self.times
            and call.verb == self.verb
            and call.plural == self.plural
            and (self.name is None or call.name == self.name)
        )


@attrs.define(kw_only=True)
class StrictEmulator(kmock.KubernetesEmulator):
    """Routes every request for a known resource to FakeKube; the rest (discovery) to kmock."""

    backend: Any = None

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        try:
            kmock_parsing.parse_path(raw_request.path)
        except ValueError:  # kmock cannot parse e.g. GET /api/v1/namespaces; serve it without kmock's parser
            return await self._serve_unparsed(raw_request)
        return await super().__call__(raw_request)

    async def _serve_unparsed(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        body = await raw.read()
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        request = Request(
            id=len(self._requests),
            raw_request=raw,
            url=raw.url,
            method=raw.method,
            params=dict(raw.query),
            headers=dict(raw.headers),
            body=body,
            text=body.decode(errors="replace"),
            data=data,
        )
        self._requests.append(request)
        try:
            return await self._handle(request)
        except Exception as exc:
            if self._errors:
                self._errors[-1].append(exc)
            return await self._render_error(exc)

    async def _handle(self, request: Request) -> aiohttp.web.StreamResponse:
        fallback = super(kmock.KubernetesEmulator, self)._handle
        return await self.backend.handle(request, fallback)  # type: ignore[no-any-return]

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        response = await super()._render_error(exc)
        if isinstance(exc, kmock.KubernetesError) and isinstance(exc.details, Mapping):
            retry_after = exc.details.get("retryAfterSeconds")
            if retry_after:
                response.headers["Retry-After"] = str(retry_after)
        return response


def _random_suffix(length: int = 5) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(secrets.choice(alphabet) for _ in range(length))


@dataclass(frozen=True)
class Route:
    """A Kubernetes API path taken apart (kmock's parser mistakes /api/v1/namespaces/NAME for a namespace)."""

    group: str
    version: str
    plural: str | None
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_route(path: str) -> Route | None:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    namespace_subresource = len(rest) == 3 and rest[2] in ("status", "finalize")
    if len(rest) >= 3 and rest[0] == "namespaces" and not namespace_subresource:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0] if rest else None
    name = rest[1] if len(rest) > 1 else None
    return Route(group, version, plural, namespace, name, "/".join(rest[2:]) or None)


def _verb(method: str, params: Mapping[str, str], route: Route | None) -> str:
    name = route.name if route else None
    if method == "GET":
        if params.get("watch") in ("true", "1"):
            return "watch"
        return "get" if name else "list"
    if method == "POST":
        return "evict" if route and route.subresource == "eviction" else "create"
    return {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


class FakeKube:
    """The fake cluster: serve it with `async with FakeKube() as fake`, point a client at `fake.url`."""

    def __init__(
        self,
        *,
        clock_scale: float | None = 0.01,
        controllers: bool = False,
        grants: Iterable[Grant] | None = CONTROLLER_GRANTS,
        state_file: Path | None = None,
        port: int | None = None,
        fault_seed: int = 0,
    ) -> None:
        self.emulator = StrictEmulator(backend=self)
        # Restart with state: objects are loaded from `state_file` when serving starts and saved to it when
        # serving stops, so `async with FakeKube(state_file=f, port=p)` twice is one API server restarted.
        self.state_file = state_file
        self.port = port
        self.faults = Faults(fault_seed)
        self.grants = None if grants is None else frozenset(grants)
        self.store = Store(self.emulator.objects)
        self.clock = FakeClock(clock_scale)
        self.controllers = controllers
        self.replacement_node: str | None = None
        self.pdb_retry_after = 0
        self.calls: list[Call] = []
        # Bearer token -> user name: who made a request (`Call.user`); the controller's kubeconfig token is
        # its service account. Tests add people: `fake.users["alice-token"] = "alice@example.com"`.
        self.users: dict[str, str] = {"fake-token": CONTROLLER_USER}
        self._rules: list[_Rule] = []
        self._deadlines: dict[tuple[str, str], float] = {}
        self._replaced: set[str] = set()
        self._server: kmock.Server | None = None
        self._next_ip = 1
        self.bookmark_interval = 1.0  # real seconds without an event before a watch gets a BOOKMARK
        self.open_watches = 0
        self._watch_generation = 0
        self._closing = False
        self._changed = asyncio.Event()
        self.store.listeners.append(self._on_store_change)
        self._declare_resources()
        for ns in ("default", "kube-system"):
            self.add_namespace(ns)

    def _declare_resources(self) -> None:
        """API discovery (/api/v1, /apis/apps/v1, ...) lists the resources the fake serves."""
        for rt in RESOURCES.values():
            subresources = {"status"} if rt.has_status else set()
            if rt.plural == "pods":
                subresources.add("eviction")
            self.emulator.resources[rt.ref] = kmock.ResourceInfo(
                kind=rt.kind,
                singular=rt.kind.lower(),
                namespaced=rt.namespaced,
                subresources=subresources,
                verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
            )

    # ----------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> FakeKube:
        self._closing = False
        await self.emulator.__aenter__()
        if self.state_file is not None and self.state_file.exists():
            self.load_state(self.state_file)
        await self._listen()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        await self._stop_listening()
        await self.emulator.__aexit__(None, None, None)
        if self.state_file is not None:
            self.save_state(self.state_file)

    async def _listen(self) -> None:
        self._server = kmock.Server(self.emulator, host="127.0.0.1", port=self.port)
        await self._server.__aenter__()
        self.port = self._server.port  # a restart or the end of an outage comes back on the same port

    async def _stop_listening(self) -> None:
        assert self._server is not None
        self._closing = True
        self._on_store_change()  # open watches end
        await self._server.__aexit__(None, None, None)
        self._server = None
        self._closing = False

    async def outage(self, seconds: float) -> None:
        """Stop listening for `seconds` (connections refused, open ones closed), then serve again on the same
        port with the same objects: an API server that went away and came back."""
        await self._stop_listening()
        try:
            await asyncio.sleep(seconds)
        finally:
            await self._listen()

    def save_state(self, path: Path) -> None:
        """Write every stored object and the revision to `path` (JSON), atomically."""
        objects = [
            {"plural": plural, "namespace": namespace, "name": name, "object": obj}
            for plural, live in self.store._live.items()
            for (namespace, name), obj in live.items()
        ]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"revision": self.store.revision, "objects": objects}))
        tmp.replace(path)

    def load_state(self, path: Path) -> None:
        """Load what `save_state` wrote: the objects as they were, resourceVersions and the revision kept (a
        watch from before the restart is answered 410 Gone, as after compaction)."""
        state = json.loads(path.read_text())
        for entry in state["objects"]:
            rt = resource_type(entry["plural"])
            obj = entry["object"]
            version = obj["metadata"]["resourceVersion"]
            self.store.load(rt, entry["namespace"], entry["name"], obj)
            obj["metadata"]["resourceVersion"] = version
        self.store.revision = max(self.store.revision, int(state["revision"]))
        self.store.compacted = self.store.revision

    @property
    def url(self) -> str:
        assert self._server is not None, "the fake is not serving; use `async with FakeKube()`"
        return str(self._server.url).rstrip("/")

    def internal_errors(self) -> list[Exception]:
        """Exceptions inside the fake itself (bugs), as opposed to the Kubernetes errors it answers."""
        errors = self.emulator.errors if self.emulator.active else []
        return [e for e in errors if not isinstance(e, kmock.KubernetesError)]

    # ----------------------------------------------------------------- request entry

    async def handle(
        self, request: Request, fallback: Callable[[Request], Awaitable[aiohttp.web.StreamResponse]]
    ) -> aiohttp.web.StreamResponse:
        route = parse_route(request.url.path)
        call = self._record(request, route)
        try:
            try:
                await self.faults.apply(call.verb, call.plural, call.path)
            except kmock.KubernetesError:
                call.injected = True
                raise
            self.reap()
            rt = RESOURCES.get((route.group, route.version, route.plural or "")) if route else None
            if rt is not None and route is not None:
                self._authorize(rt, route, call)
            await self._run_rules(call)
            if rt is None or route is None:
                response = await fallback(request)
            elif call.verb == "watch":
                return await self._watch(rt, route, request, call)
            else:
                status, body = self._dispatch(rt, route, request, call)
                response = aiohttp.web.json_response(body, status=status)
                call.bytes = len(response.body or b"") if isinstance(response.body, bytes) else 0
            call.status = response.status
            return response
        except kmock.KubernetesError as exc:
            call.status = exc.status
            raise

    def _authorize(self, rt: ResourceType, route: Route, call: Call) -> None:
        """403 Forbidden, in the apiserver's words, for a verb on a resource the grants do not cover."""
        if self.grants is None:
            return
        verb = "create" if call.verb == "evict" else call.verb
        resource = rt.plural if route.subresource is None else f"{rt.plural}/{route.subresource}"
        if (rt.group, resource, verb) in self.grants:
            return
        subject = f'{rt.qualified()} "{route.name}"' if route.name else rt.qualified()
        scope = f'in the namespace "{route.namespace}"' if route.namespace else "at the cluster scope"
        raise _error(
            403,
            "Forbidden",
            f'{subject} is forbidden: User "{CONTROLLER_USER}" cannot {verb} resource "{resource}" '
            f'in API group "{rt.group}" {scope}',
            {"name": route.name or "", "group": rt.group, "kind": rt.plural},
        )

    def _record(self, request: Request, route: Route | None) -> Call:
        headers = {k.lower(): v for k, v in request.headers.items()}
        method = str(request.method.value).upper()
        call = Call(
            seq=len(self.calls),
            verb=_verb(method, request.params, route),
            method=method,
            path=request.url.path,
            plural=route.plural if route else None,
            namespace=route.namespace if route else None,
            name=route.name if route else None,
            subresource=route.subresource if route else None,
            params=dict(request.params),
            body=deep_copy(request.data),
            content_type=headers.get("content-type", "").split(";")[0].strip(),
            time=self.clock.now(),
            at=time.monotonic(),
            manager=manager_of(request.params, headers),
        )
        auth = headers.get("authorization", "")
        call.user = self.users.get(auth.removeprefix("Bearer ").strip(), "system:anonymous") if auth else ""
        self.calls.append(call)
        return call

    async def _run_rules(self, call: Call) -> None:
        for rule in self._rules:
            if rule.wants(call):
                rule.fired += 1
                result = rule.action(call)
                if inspect.isawaitable(result):
                    await result

    def _dispatch(self, rt: ResourceType, route: Route, request: Request, call: Call) -> tuple[int, Any]:
        verb = call.verb
        namespace = route.namespace
        if rt.namespaced is False and namespace is not None:
            raise _error(404, "NotFound", f"the server could not find the requested resource ({rt.plural})")
        if verb == "list":
            return 200, self._list(rt, namespace, request.params)
        if route.name is None:
            if verb == "create":
                return 201, self._create(rt, namespace, request.data, request.params, call)
            raise _error(405, "MethodNotAllowed", f"{call.method} on a collection is not emulated")
        if rt.namespaced and namespace is None:
            raise _error(404, "NotFound", "the server could not find the requested resource")
        return self._dispatch_named(rt, namespace, route.name, request, call)

    def _dispatch_named(
        self, rt: ResourceType, namespace: str | None, name: str, request: Request, call: Call
    ) -> tuple[int, Any]:
        sub = call.subresource
        if (
            sub not in (None, "status", "eviction")
            or (sub == "status" and not rt.has_status)
            or (sub == "eviction" and (rt.plural != "pods" or call.verb != "evict"))
        ):
            raise _error(404, "NotFound", f"the server could not find the requested resource ({sub})")
        current = self.store.get(rt, namespace, name)
        call.uid = (current or {}).get("metadata", {}).get("uid")
        if call.verb == "evict":
            return 201, self._evict(rt, namespace, name, current, request.data)
        if current is None:
            raise not_found(rt, name)
        dry_run = request.params.get("dryRun") == "All"
        if call.verb == "get":
            return 200, current
        if call.verb == "update":
            return 200, self._replace(
                rt, current, request.data, call, status_only=sub == "status", dry_run=dry_run
            )
        if call.verb == "patch":
            return 200, self._patch(
                rt, current, request.data, call, status_only=sub == "status", dry_run=dry_run
            )
        if call.verb == "delete":
            return 200, self._delete(rt, current, request.data or {}, request.params, dry_run)
        raise _error(405, "MethodNotAllowed", f"{call.method} is not emulated")

    # ----------------------------------------------------------------- reads

    @staticmethod
    def _selectors(rt: ResourceType, params: Mapping[str, str]) -> Callable[[Mapping[str, Any]], bool]:
        try:
            labels = parse_label_selector(params.get("labelSelector"))
            fields = parse_field_selector(params.get("fieldSelector"), rt.plural)
        except SelectorError as exc:
            raise bad_request(str(exc)) from exc

        def selected(o: Mapping[str, Any]) -> bool:
            return all(r.matches(o["metadata"].get("labels") or {}) for r in labels) and all(
                f.matches(o) for f in fields
            )

        return selected

    def _list(self, rt: ResourceType, namespace: str | None, params: Mapping[str, str]) -> dict[str, Any]:
        selected = self._selectors(rt, params)  # validates both selectors first
        node = None
        if rt.plural == "pods":  # the apiserver's watch cache indexes pods by node: answer from the index
            fields = parse_field_selector(params.get("fieldSelector"), rt.plural)
            node = next((f.value for f in fields if f.field == "spec.nodeName" and not f.negate), None)
        items = self.store.stored(rt, namespace, selected, node=node)
        metadata: dict[str, Any] = {"resourceVersion": str(self.store.revision)}
        start = int(params.get("continue") or 0)
        limit = int(params.get("limit") or 0)
        if limit > 0:
            if start + limit < len(items):
                metadata["continue"] = str(start + limit)
            items = items[start : start + limit]
        # shallow copies: the body is serialized at once and never changed (a deep copy of 500 nodes costs ~1 s)
        items = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": metadata, "items": items}

    # ----------------------------------------------------------------- watch

    async def _watch(
        self, rt: ResourceType, route: Route, request: Request, call: Call
    ) -> aiohttp.web.StreamResponse:
        """A watch stream: one JSON event per line, from `resourceVersion` on, as the apiserver sends them.

        No resourceVersion (or "0") starts with ADDED for every current object; one older than the store's
        compaction gets an ERROR event with a 410 Expired Status (what a real apiserver sends once the watch
        is open). With allowWatchBookmarks=true a BOOKMARK carrying the current revision is sent after
        `bookmark_interval` real seconds without events. The stream ends after timeoutSeconds, when the test
        calls `end_watches()`, or when the fake stops.
        """
        if rt.namespaced is False and route.namespace is not None:
            raise _error(404, "NotFound", f"the server could not find the requested resource ({rt.plural})")
        params = request.params
        selected = self._selectors(rt, params)
        bookmarks = params.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(params.get("timeoutSeconds") or 0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout if timeout > 0 else None
        generation = self._watch_generation
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request._raw_request)
        call.status = 200

        async def send(event_type: str, obj: Mapping[str, Any]) -> None:
            line = json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"
            call.bytes += len(line)
            await response.write(line)

        raw_rv = params.get("resourceVersion") or "0"
        if raw_rv == "0":
            for item in self.store.stored(rt, route.namespace, selected):
                await send("ADDED", item)
            position = self.store.revision
        else:
            try:
                position = int(raw_rv)
            except ValueError:
                position = -1
            if position < self.store.compacted:
                # A client may hang up as soon as it has read the 410 (it relists): that ends the stream, as on
                # a real apiserver, and is not a failure of the fake.
                with contextlib.suppress(ConnectionResetError):
                    await send("ERROR", {
                        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": f"too old resource version: {raw_rv} ({self.store.compacted})",
                        "reason": "Expired", "code": 410,
                    })
                    await response.write_eof()
                return response
        self.open_watches += 1
        try:
            while not self._closing and generation == self._watch_generation:
                for change in self.store.changes_after(position):
                    obj = change.object if change.object is not None else change.last
                    if (
                        change.plural == rt.plural
                        and (route.namespace is None or change.namespace == route.namespace)
                        and obj is not None
                        and selected(obj)
                    ):
                        await send(change.type, obj)
                    position = change.revision
                position = max(position, self.store.revision)
                wait = self.bookmark_interval
                if deadline is not None:
                    wait = min(wait, deadline - loop.time())
                    if wait <= 0:
                        break
                changed = self._changed
                try:
                    await asyncio.wait_for(changed.wait(), timeout=wait)
                except TimeoutError:
                    if bookmarks and generation == self._watch_generation and not self._closing:
                        await send("BOOKMARK", {
                            "kind": rt.kind, "apiVersion": rt.api_version,
                            "metadata": {"resourceVersion": str(self.store.revision)},
                        })
                        position = self.store.revision
        except (ConnectionResetError, asyncio.CancelledError):
            return response
        finally:
            self.open_watches -= 1
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    def _on_store_change(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def end_watches(self) -> None:
        """Close every open watch stream (as an apiserver restart or a load balancer would)."""
        self._watch_generation += 1
        self._on_store_change()

    def expire_watches(self) -> None:
        """Close every watch and compact: a client resuming from its last resourceVersion now gets 410."""
        self.store.compact()
        self.end_watches()

    # ----------------------------------------------------------------- writes

    def _validate(self, rt: ResourceType, obj: Mapping[str, Any], namespace: str | None) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        causes = check_object_name(rt.kind, name) + check_labels(meta.get("labels"))
        causes += check_annotations(meta.get("annotations"))
        spec = obj.get("spec") or {}
        if rt.plural == "nodes":
            causes += check_node_taints(spec.get("taints"))
            if "unschedulable" in spec and not isinstance(spec["unschedulable"], bool):
                causes.append(("spec.unschedulable", "must be a boolean"))
        if rt.plural == "events":
            causes += check_event(obj, namespace or "")
        if rt.plural == "pods":
            causes += self._pod_problems(spec)
        if rt.plural == "poddisruptionbudgets" and "minAvailable" in spec and "maxUnavailable" in spec:
            causes.append(("spec", "minAvailable and maxUnavailable cannot be both set"))
        if causes:
            raise invalid(rt, name, causes)

    @staticmethod
    def _pod_problems(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
        causes = []
        if not spec.get("containers"):
            causes.append(("spec.containers", "Required value"))
        for kind in ("containers", "initContainers"):
            for index, container in enumerate(spec.get(kind) or []):
                resources = container.get("resources") or {}
                requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
                for res, amount in requests.items():
                    if "/" in res and not res.startswith("kubernetes.io/") and limits.get(res) != amount:
                        causes.append(
                            (
                                f"spec.{kind}[{index}].resources.requests[{res}]",
                                f"Invalid value: {amount!r}: must be equal to {res} limit",
                            )
                        )
        grace = spec.get("terminationGracePeriodSeconds")
        if grace is not None and (not isinstance(grace, int) or grace < 0):
            causes.append(("spec.terminationGracePeriodSeconds", "must be a non-negative integer"))
        return causes

    @staticmethod
    def _default_pod(pod: dict[str, Any]) -> None:
        """Extended resources given only as limits get equal requests (apiserver defaulting)."""
        for kind in ("containers", "initContainers"):
            for container in pod.get("spec", {}).get(kind) or []:
                resources = container.setdefault("resources", {})
                requests = resources.setdefault("requests", {})
                for res, amount in (resources.get("limits") or {}).items():
                    requests.setdefault(res, amount)
        pod["spec"].setdefault("terminationGracePeriodSeconds", 30)
        pod.setdefault("status", {}).setdefault("phase", "Pending")

    def _create(
        self, rt: ResourceType, namespace: str | None, body: Any, params: Mapping[str, str], call: Call | None = None
    ) -> dict[str, Any]:
        if not isinstance(body, Mapping):
            raise bad_request("the body of the request must be a JSON object")
        obj = deep_copy(dict(body))
        if obj.get("kind") not in (None, rt.kind) or obj.get("apiVersion") not in (None, rt.api_version):
            raise bad_request(
                f"the API version in the data ({obj.get('apiVersion')}) does not match the expected "
                f"API version ({rt.api_version}) or kind ({rt.kind})"
            )
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            if self.store.get(resource_type("namespaces"), None, str(namespace)) is None:
                raise not_found(resource_type("namespaces"), str(namespace))
            meta["namespace"] = namespace
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise invalid(rt, "", [("metadata.name", "Required value: name or generateName is required")])
            meta["name"] = meta["generateName"] + _random_suffix()
        name = meta["name"]
        if self.store.get(rt, namespace, name) is not None:
            raise _error(
                409,
                "AlreadyExists",
                f'{rt.qualified()} "{name}" already exists',
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(key, None)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.clock.wall()
        meta["generation"] = 1
        if rt.plural == "pods":
            self._default_pod(obj)
        meta.pop("managedFields", None)
        if call is not None:
            update_managed_fields({}, obj, manager=call.manager, api_version=rt.api_version,
                                  now=self.clock.wall(), subresource=None)
        self._validate(rt, obj, namespace)
        if params.get("dryRun") == "All":
            return obj
        return self.store.put(rt, namespace, name, obj)

    def _check_update(self, rt: ResourceType, old: Mapping[str, Any], new: dict[str, Any]) -> None:
        old_meta, new_meta = old["metadata"], new.setdefault("metadata", {})
        name = old_meta["name"]
        if new_meta.get("name") != name or new_meta.get("namespace") != old_meta.get("namespace"):
            raise bad_request(
                f"the name or namespace of the object ({new_meta.get('name')}) does not match "
                f"the name on the URL ({name})"
            )
        if new_meta.get("uid") not in (None, old_meta["uid"]):
            raise conflict(
                rt,
                name,
                f"Precondition failed: UID in precondition: {new_meta.get('uid')}, "
                f"UID in object meta: {old_meta['uid']}",
            )
        if rt.plural == "pods":
            self._check_pod_spec(rt, old, new)

    @staticmethod
    def _check_pod_spec(rt: ResourceType, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        def frozen(spec: Mapping[str, Any]) -> dict[str, Any]:
            kept = {k: deep_copy(v) for k, v in spec.items() if k not in MUTABLE_POD_SPEC}
            for kind in ("containers", "initContainers"):
                for container in kept.get(kind) or []:
                    container.pop("image", None)
            return kept

        if frozen(old.get("spec") or {}) != frozen(new.get("spec") or {}):
            raise invalid(
                rt,
                old["metadata"]["name"],
                [
                    (
                        "spec",
                        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                        "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` "
                        "(only additions to existing tolerations), `spec.terminationGracePeriodSeconds`",
                    )
                ],
            )

    def _finish_write(
        self, rt: ResourceType, old: dict[str, Any], new: dict[str, Any], *, status_only: bool, dry_run: bool,
        call: Call | None = None,
    ) -> dict[str, Any]:
        """Keep what the endpoint may not change, validate, and store unless nothing changed."""
        if status_only:
            merged = deep_copy(old)
            merged["status"] = new.get("status", {})
            new = merged
        elif rt.has_status:
            new.pop("status", None)
            if "status" in old:
                new["status"] = deep_copy(old["status"])
        system = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
        for key in system:
            new["metadata"].pop(key, None)
            if key in old["metadata"]:
                new["metadata"][key] = old["metadata"][key]
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        # managedFields are the server's: what a request sends there is replaced by the old object's
        new["metadata"].pop("managedFields", None)
        if "managedFields" in old["metadata"]:
            new["metadata"]["managedFields"] = deep_copy(old["metadata"]["managedFields"])
        if new == old:
            return old
        if call is not None:
            update_managed_fields(old, new, manager=call.manager, api_version=rt.api_version,
                                  now=self.clock.wall(), subresource="status" if status_only else None)
        if (new.get("spec") != old.get("spec")) and not status_only:
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        self._validate(rt, new, old["metadata"].get("namespace"))
        if dry_run:
            return new
        return self.store.put(rt, old["metadata"].get("namespace"), old["metadata"]["name"], new)

    def _replace(
        self, rt: ResourceType, old: dict[str, Any], body: Any, call: Call, *, status_only: bool, dry_run: bool
    ) -> dict[str, Any]:
        if not isinstance(body, Mapping):
            raise bad_request("the body of the request must be a JSON object")
        new = deep_copy(dict(body))
        rv = (new.get("metadata") or {}).get("resourceVersion")
        if not rv:
            raise invalid(
                rt,
                old["metadata"]["name"],
                [("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")],
            )
        if rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt,
                old["metadata"]["name"],
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        self._check_update(rt, old, new)
        return self._finish_write(rt, old, new, status_only=status_only, dry_run=dry_run, call=call)

    def _patch(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        body: Any,
        call: Call,
        *,
        status_only: bool,
        dry_run: bool,
    ) -> dict[str, Any]:
        manager = call.params.get("fieldManager", "")
        if len(manager) > 128 or len(call.manager) > 128:
            raise invalid(rt, old["metadata"]["name"], [("fieldManager", "must be at most 128 characters")])
        try:
            new = self._apply_patch(call.content_type, deep_copy(old), body)
        except PatchError as exc:
            raise _error(422, "Invalid", str(exc)) from exc
        except UnsupportedPatch as exc:
            raise _error(501, "NotImplemented", f"tests.fakekube: {exc}") from exc
        if not isinstance(new, dict):
            raise bad_request("the patch must produce a JSON object")
        if rt.plural == "nodes" and (problem := node_condition_time_problem(new)):
            raise bad_request(problem)
        patch_rv = (
            ((body or {}).get("metadata") or {}).get("resourceVersion") if isinstance(body, Mapping) else None
        )
        if patch_rv is not None and patch_rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt,
                old["metadata"]["name"],
                "the object has been modified; please apply your changes to the latest version and try again",
            )
        self._check_update(rt, old, new)
        return self._finish_write(rt, old, new, status_only=status_only, dry_run=dry_run, call=call)

    @staticmethod
    def _apply_patch(content_type: str, old: dict[str, Any], body: Any) -> Any:
        if content_type == "application/strategic-merge-patch+json":
            if not isinstance(body, Mapping):
                raise PatchError("a strategic merge patch must be a JSON object")
            return strategic_merge_patch(old, body)
        if content_type == "application/merge-patch+json":
            return json_merge_patch(old, body)
        if content_type == "application/json-patch+json":
            return json_patch(old, body)
        if content_type == "application/apply-patch+yaml":
            raise UnsupportedPatch("server-side apply is not emulated")
        raise _error(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - "
            f"accepted media types include: application/json-patch+json, "
            f"application/merge-patch+json, application/strategic-merge-patch+json "
            f"(got {content_type!r})",
        )

    # ----------------------------------------------------------------- deletion and eviction

    @staticmethod
    def _check_preconditions(rt: ResourceType, obj: Mapping[str, Any], options: Mapping[str, Any]) -> None:
        pre = options.get("preconditions") or {}
        meta = obj["metadata"]
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise conflict(
                rt,
                meta["name"],
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta['uid']}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise conflict(
                rt,
                meta["name"],
                f"Precondition failed: ResourceVersion in precondition: "
                f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}",
            )

    def _delete(
        self,
        rt: ResourceType,
        obj: dict[str, Any],
        options: Mapping[str, Any],
        params: Mapping[str, str],
        dry_run: bool,
    ) -> dict[str, Any]:
        self._check_preconditions(rt, obj, options)
        grace = options.get("gracePeriodSeconds", params.get("gracePeriodSeconds"))
        if dry_run:
            return obj
        if rt.plural == "pods":
            return self._delete_pod(obj, None if grace is None else int(grace))
        meta = obj["metadata"]
        if meta.get("finalizers"):
            meta.setdefault("deletionTimestamp", self.clock.wall())
            return self.store.put(rt, meta.get("namespace"), meta["name"], obj)
        self.store.remove(rt, meta.get("namespace"), meta["name"])
        return obj

    def _delete_pod(self, pod: dict[str, Any], grace: int | None) -> dict[str, Any]:
        rt = resource_type("pods")
        meta, spec = pod["metadata"], pod.get("spec") or {}
        key = (meta["namespace"], meta["name"])
        if grace is not None and grace < 0:
            raise invalid(rt, meta["name"], [("gracePeriodSeconds", "must be >= 0")])
        now = self.clock.now()
        if meta.get("deletionTimestamp"):
            if grace is not None and now + grace < self._deadlines.get(key, now):
                self._deadlines[key] = now + grace
            return pod
        period = grace if grace is not None else int(spec.get("terminationGracePeriodSeconds", 30))
        if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            period = 0
        if period == 0:
            self._remove_pod(pod)
            return pod
        meta["deletionTimestamp"] = self.clock.wall(now + period)
        meta["deletionGracePeriodSeconds"] = period
        stored = self.store.put(rt, meta["namespace"], meta["name"], pod)
        self._deadlines[key] = now + period
        self._on_pod_terminating(stored)
        return stored

    def _remove_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        self._deadlines.pop((meta["namespace"], meta["name"]), None)
        self.store.remove(resource_type("pods"), meta["namespace"], meta["name"])
        self._on_pod_terminating(pod)
        self._on_pod_gone(pod)

    def reap(self) -> None:
        """Remove terminating pods whose grace period has passed on the fake clock."""
        now = self.clock.now()
        for (namespace, name), deadline in sorted(self._deadlines.items(), key=lambda kv: kv[1]):
            if deadline <= now:
                pod = self.store.get(resource_type("pods"), namespace, name)
                if pod is None:
                    self._deadlines.pop((namespace, name), None)
                else:
                    self._remove_pod(pod)

    def _evict(
        self, rt: ResourceType, namespace: str | None, name: str, pod: dict[str, Any] | None, body: Any
    ) -> dict[str, Any]:
        if (
            not isinstance(body, Mapping)
            or body.get("kind") != "Eviction"
            or body.get("apiVersion") not in ("policy/v1", "policy/v1beta1")
        ):
            raise bad_request("the body of an eviction must be a policy/v1 Eviction")
        if (body.get("metadata") or {}).get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        if pod is None:
            raise not_found(rt, name)
        options = body.get("deleteOptions") or {}
        self._check_preconditions(rt, pod, options)
        if not self._can_ignore_pdb(pod):
            self._check_budgets(pod)
        grace = options.get("gracePeriodSeconds")
        self._delete_pod(pod, None if grace is None else int(grace))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    @staticmethod
    def _can_ignore_pdb(pod: Mapping[str, Any]) -> bool:
        phase = (pod.get("status") or {}).get("phase")
        return bool(pod["metadata"].get("deletionTimestamp")) or phase in (*TERMINAL_PHASES, "Pending")

    def _check_budgets(self, pod: Mapping[str, Any]) -> None:
        namespace = pod["metadata"]["namespace"]
        pdbs = [
            p
            for p in self.store.items(resource_type("poddisruptionbudgets"), namespace)
            if pdb_selects(p, pod)
        ]
        if len(pdbs) > 1:
            raise _error(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, "
                "which the eviction subresource does not support.",
            )
        if not pdbs:
            return
        pdb = pdbs[0]
        budget = compute_budget(
            pdb, self.store.items(resource_type("pods"), namespace), self._controller_replicas
        )
        if not is_healthy(pod) and (
            (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
            or (budget.error is None and budget.current_healthy >= budget.desired_healthy)
        ):
            return
        if budget.disruptions_allowed > 0:
            return
        cause = budget.error or (
            f"The disruption budget {pdb['metadata']['name']} needs {budget.desired_healthy} "
            f"healthy pods and has {budget.current_healthy} currently"
        )
        details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
        if self.pdb_retry_after:
            details["retryAfterSeconds"] = self.pdb_retry_after
        raise _error(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
            details,
        )

    def _controller_replicas(self, pod: Mapping[str, Any]) -> int | None:
        owner = next((o for o in pod["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
        plural = {
            "ReplicaSet": "replicasets",
            "StatefulSet": "statefulsets",
            "ReplicationController": "replicationcontrollers",
        }.get((owner or {}).get("kind", ""))
        if owner is None or plural is None:
            return None
        controller = self.store.get(resource_type(plural), pod["metadata"]["namespace"], owner["name"])
        if controller is None or controller["metadata"]["uid"] != owner["uid"]:
            return None
        return int((controller.get("spec") or {}).get("replicas", 1))

    # ----------------------------------------------------------------- controllers

    def _owner(self, pod: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
        owner = next(
            (
                o
                for o in pod["metadata"].get("ownerReferences") or []
                if o.get("controller") and o.get("kind") == kind
            ),
            None,
        )
        if owner is None:
            return None
        plural = {"ReplicaSet": "replicasets", "StatefulSet": "statefulsets"}[kind]
        found = self.store.get(resource_type(plural), pod["metadata"]["namespace"], owner["name"])
        return found if found is not None and found["metadata"]["uid"] == owner["uid"] else None

    def _replacement(self, pod: Mapping[str, Any], name: str) -> dict[str, Any]:
        new = deep_copy(dict(pod))
        meta = new["metadata"]
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion"):
            meta.pop(key, None)
        meta["name"], meta["uid"], meta["creationTimestamp"] = name, str(uuid.uuid4()), self.clock.wall()
        new["spec"].pop("nodeName", None)
        if self.replacement_node:
            new["spec"]["nodeName"] = self.replacement_node
            new["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        else:
            new["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
        return new

    def _on_pod_terminating(self, pod: Mapping[str, Any]) -> None:
        """ReplicaSets replace a pod as soon as it terminates (terminating pods are not active)."""
        uid = pod["metadata"]["uid"]
        if not self.controllers or uid in self._replaced:
            return
        rs = self._owner(pod, "ReplicaSet")
        if rs is None:
            return
        self._replaced.add(uid)
        name = f"{rs['metadata']['name']}-{_random_suffix()}"
        self.store.put(
            resource_type("pods"), pod["metadata"]["namespace"], name, self._replacement(pod, name)
        )

    def _on_pod_gone(self, pod: Mapping[str, Any]) -> None:
        """StatefulSets recreate a pod under the same name once the old one is gone."""
        if not self.controllers or self._owner(pod, "StatefulSet") is None:
            return
        name = pod["metadata"]["name"]
        self.store.put(
            resource_type("pods"), pod["metadata"]["namespace"], name, self._replacement(pod, name)
        )

    # ----------------------------------------------------------------- test helpers: objects

    def get(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.reap()
        return self.store.get(resource_type(plural), namespace, name)

    def node(self, name: str) -> dict[str, Any] | None:
        return self.get("nodes", None, name)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get("pods", namespace, name)

    def items(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        self.reap()
        return self.store.items(resource_type(plural), namespace)

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.items("pods", namespace)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create an object directly in the store (as another client would), with uid and resourceVersion."""
        kind = obj["kind"]
        rt = next(t for t in RESOURCES.values() if t.kind == kind)
        meta = obj["metadata"]
        namespace = meta.get("namespace") if rt.namespaced else None
        if rt.namespaced and self.store.get(resource_type("namespaces"), None, str(namespace)) is None:
            self.add_namespace(str(namespace))
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", self.clock.wall())
        meta.setdefault("generation", 1)
        if rt.plural == "pods":
            self._default_pod(obj)
        self._validate(rt, obj, namespace)
        return self.store.put(rt, namespace, meta["name"], obj)

    def load(self, objects: list[dict[str, Any]]) -> None:
        """Bulk-load trusted objects (benchmarks): no validation, no copies, no change log; compacts."""
        for obj in objects:
            rt = next(t for t in RESOURCES.values() if t.kind == obj["kind"])
            meta = obj["metadata"]
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", self.clock.wall())
            self.store.load(rt, meta.get("namespace") if rt.namespaced else None, meta["name"], obj)

    def write(
        self, plural: str, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        """A concurrent writer: strategic-merge `patch` into the object (bumps resourceVersion)."""
        rt = resource_type(plural)
        old = self.store.get(rt, namespace, name)
        if old is None:
            raise KeyError((plural, namespace, name))
        new = strategic_merge_patch(deep_copy(old), patch)
        self._validate(rt, new, namespace)
        return self.store.put(rt, namespace, name, new)

    def remove(self, plural: str, namespace: str | None, name: str) -> None:
        """Delete an object at once, as another client with grace period 0 would."""
        self.store.remove(resource_type(plural), namespace, name)

    def set_pod_phase(
        self, namespace: str, name: str, phase: str, *, ready: bool | None = None
    ) -> dict[str, Any]:
        is_ready = (phase == "Running") if ready is None else ready
        status = {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if is_ready else "False"}],
        }
        return self.write("pods", namespace, name, {"status": status})

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        existing = self.store.get(resource_type("namespaces"), None, name)
        if existing is not None:
            return existing
        return self.put(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
        )

    def add_node(
        self,
        name: str,
        *,
        ip: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        taints: list[dict[str, Any]] | None = None,
        unschedulable: bool = False,
        gpus: int = 8,
        ready: bool = True,
    ) -> dict[str, Any]:
        if ip is None:
            ip = f"127.0.0.{self._next_ip}"
            self._next_ip += 1
        return self.put(
            builders.node_body(
                name,
                ip,
                labels=labels,
                annotations=annotations,
                taints=taints,
                unschedulable=unschedulable,
                gpus=gpus,
                ready=ready,
            )
        )

    def reboot_node(self, name: str, *, ready: bool = True) -> str:
        """The kubelet after a reboot: a new status.nodeInfo.bootID and the Ready condition; returns the ID."""
        boot_id = str(uuid.uuid4())
        self.write("nodes", None, name, {"status": {
            "nodeInfo": {"bootID": boot_id},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }})
        return boot_id

    def set_node_ready(self, name: str, ready: bool) -> None:
        self.write("nodes", None, name, {"status": {"conditions": [
            {"type": "Ready", "status": "True" if ready else "False"}]}})

    def add_pod(
        self,
        name: str,
        namespace: str = "default",
        *,
        node: str | None = None,
        gpus: int = 0,
        mig: Mapping[str, int] | None = None,
        gpu_in: str = "both",
        init_gpus: int = 0,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        owner: Mapping[str, Any] | None = None,
        phase: str = "Running",
        ready: bool = True,
        grace: int | None = 30,
    ) -> dict[str, Any]:
        return self.put(
            builders.pod_body(
                name,
                namespace,
                node=node,
                gpus=gpus,
                mig=mig,
                gpu_in=gpu_in,
                init_gpus=init_gpus,
                labels=labels,
                annotations=annotations,
                owner=owner,
                phase=phase,
                ready=ready,
                grace=grace,
            )
        )

    def add_mirror_pod(self, name: str, namespace: str, node: str, *, gpus: int = 0) -> dict[str, Any]:
        body = builders.pod_body(
            name,
            namespace,
            node=node,
            gpus=gpus,
            annotations={
                "kubernetes.io/config.mirror": secrets.token_hex(16),
                "kubernetes.io/config.source": "file",
            },
        )
        node_obj = self.node(node)
        assert node_obj is not None, f"no node {node}"
        body["metadata"]["ownerReferences"] = [builders.owner_ref(node_obj)]
        return self.put(body)

    def add_deployment(
        self,
        name: str,
        namespace: str = "default",
        *,
        replicas: int = 1,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        return self.put(builders.deployment_body(name, namespace, replicas, labels or {"app": name}))

    def add_replicaset(
        self,
        name: str,
        namespace: str = "default",
        *,
        replicas: int = 1,
        labels: Mapping[str, str] | None = None,
        deployment: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return self.put(
            builders.replicaset_body(name, namespace, replicas, labels or {"app": name}, deployment)
        )

    def add_statefulset(
        self,
        name: str,
        namespace: str = "default",
        *,
        replicas: int = 1,
        labels: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        return self.put(builders.statefulset_body(name, namespace, replicas, labels or {"app": name}))

    def add_daemonset(
        self, name: str, namespace: str = "default", *, labels: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        return self.put(builders.daemonset_body(name, namespace, labels or {"app": name}))

    def add_cronjob(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.put(builders.cronjob_body(name, namespace, {"app": name}))

    def add_job(
        self, name: str, namespace: str = "default", *, cronjob: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return self.put(builders.job_body(name, namespace, {"job-name": name}, cronjob))

    def add_pdb(
        self,
        name: str,
        namespace: str = "default",
        *,
        match_labels: Mapping[str, str] | None = None,
        selector: Mapping[str, Any] | None = None,
        min_available: int | str | None = None,
        max_unavailable: int | str | None = None,
        unhealthy_pod_eviction_policy: str | None = None,
    ) -> dict[str, Any]:
        if selector is None and match_labels is not None:
            selector = {"matchLabels": dict(match_labels)}
        return self.put(
            builders.pdb_body(
                name,
                namespace,
                selector,
                min_available=min_available,
                max_unavailable=max_unavailable,
                unhealthy_pod_eviction_policy=unhealthy_pod_eviction_policy,
            )
        )

    def add_resource_quota(self, name: str, namespace: str, hard: Mapping[str, str]) -> dict[str, Any]:
        return self.put(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"hard": dict(hard)},
                "status": {"hard": dict(hard), "used": {}},
            }
        )

    # ----------------------------------------------------------------- test helpers: behaviour

    def before(
        self,
        verb: str,
        plural: str,
        action: Callable[[Call], Any],
        *,
        name: str | None = None,
        times: int = 1,
    ) -> None:
        """Run `action(call)` just before the next `times` matching requests are served."""
        self._rules.append(_Rule(verb, plural, name, times, action))

    def fail(
        self,
        verb: str,
        plural: str,
        status: int,
        *,
        name: str | None = None,
        times: int = 1,
        message: str = "injected by the test",
        retry_after: int | None = None,
    ) -> None:
        """Answer the next `times` matching requests with `status` (e.g. 500, 503) instead of serving them."""
        details = {"retryAfterSeconds": retry_after} if retry_after else {}
        reason = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 409: "Conflict"}

        def raise_error(call: Call) -> None:
            raise _error(status, reason.get(status, "Injected"), message, details)

        self.before(verb, plural, raise_error, name=name, times=times)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("condition not reached in the fake cluster")
            await asyncio.sleep(0.005)

    # ----------------------------------------------------------------- test helpers: request log

    def requests(
        self,
        verb: str | None = None,
        plural: str | None = None,
        *,
        name: str | None = None,
        namespace: str | None = None,
        status: int | None = None,
    ) -> list[Call]:
        return [
            c
            for c in self.calls
            if (verb is None or c.verb == verb)
            and (plural is None or c.plural == plural)
            and (name is None or c.name == name)
            and (namespace is None or c.namespace == namespace)
            and (status is None or c.status == status)
        ]

    def writes(self, plural: str | None = None) -> list[Call]:
        return [
            c
            for c in self.calls
            if c.verb in ("create", "update", "patch", "delete", "evict")
            and (plural is None or c.plural == plural)
        ]

    def evicted_uids(self) -> list[str]:
        """UIDs of pods whose eviction was accepted, in order; a repeated uid means a double eviction."""
        return [c.uid for c in self.calls if c.verb == "evict" and c.ok and c.uid]

    def history(self, plural: str) -> list[Change]:
        return [c for c in self.store.changes if c.plural == plural]

    def max_at_once(self, plural: str, predicate: Callable[[Mapping[str, Any]], bool]) -> int:
        """Replay every write: the most objects of `plural` for which `predicate` held at once."""
        state: dict[tuple[str | None, str], bool] = {}
        best = 0
        for change in self.history(plural):
            state[(change.namespace, change.name)] = change.object is not None and predicate(change.object)
            best = max(best, sum(state.values()))
        return best
