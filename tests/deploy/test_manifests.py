"""The rendered overlays: valid Kubernetes objects, least privilege, and wired the way the code expects."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from remediator import __version__
from remediator.engine.startup import resolve_worker_process
from remediator.kube import kinds as kube_kinds
from remediator.settings import Settings
from remediator.sidecar.settings import SidecarSettings
from tests.deploy.helpers import (
    CONTROLLER_LABELS,
    DEPLOY,
    MONITORING,
    NAMESPACE,
    OVERLAYS,
    ROOT,
    SIDECAR_LABELS,
    load_script,
    only,
    rendered,
)

render_definitions = load_script(DEPLOY / "render_definitions.py")

Objects = tuple[dict[str, Any], ...]
IMAGE = f"gpu-remediator:{__version__}"  # what the Dockerfile builds as docs/deploy.md says; overlays rename it
CRD_KINDS = {"PrometheusRule", "ServiceMonitor", "PodMonitor", "AlertmanagerConfig"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
K8S_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]

EXPECTED_CLUSTER_GRANTS = {
    ("", "nodes", "get"),
    ("", "nodes", "list"),
    ("", "nodes", "watch"),
    ("", "nodes", "patch"),
    ("", "nodes/status", "patch"),
    ("", "pods", "get"),
    ("", "pods", "list"),
    ("", "pods", "patch"),
    ("", "pods/eviction", "create"),
    ("", "resourcequotas", "get"),
    ("", "resourcequotas", "list"),
    ("", "resourcequotas", "patch"),
    ("apps", "deployments/scale", "get"),
    ("apps", "deployments/scale", "patch"),
    ("apps", "statefulsets/scale", "get"),
    ("apps", "statefulsets/scale", "patch"),
    ("apps", "deployments", "get"),
    ("apps", "statefulsets", "get"),
    ("batch", "jobs", "get"),
    ("batch", "jobs", "patch"),
    ("", "events", "create"),
    ("events.k8s.io", "events", "create"),
    ("", "namespaces", "get"),
    ("", "replicationcontrollers", "get"),
    ("apps", "replicasets", "get"),
    ("apps", "daemonsets", "get"),
    ("batch", "cronjobs", "get"),
}
EXPECTED_NAMESPACE_GRANTS = {
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
}


def grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    out = set()
    for rule in role["rules"]:
        assert not rule.get("resourceNames"), "resourceNames would hide grants from this check"
        assert not rule.get("nonResourceURLs")
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((group, resource, verb))
    return out


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def controller(objects: Objects) -> dict[str, Any]:
    return only(objects, "Deployment", "gpu-remediator")


def sidecar(objects: Objects) -> dict[str, Any]:
    return only(objects, "DaemonSet", "gpu-remediator-sidecar")


# -- schema ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("directory", [*sorted(OVERLAYS), "monitoring"])
def test_every_builtin_object_passes_strict_schema_validation(directory: str, version: str) -> None:
    objects = rendered(MONITORING if directory == "monitoring" else OVERLAYS[directory])
    checked = 0
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = f"{obj['kind']}/{obj['metadata']['name']} (Kubernetes {version})"
            pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")
        checked += 1
    assert checked >= 1


def test_overlays_contain_exactly_the_expected_objects() -> None:
    common = {
        ("Namespace", "gpu-remediator"),
        ("ServiceAccount", "gpu-remediator"),
        ("ServiceAccount", "gpu-remediator-sidecar"),
        ("ClusterRole", "gpu-remediator"),
        ("ClusterRoleBinding", "gpu-remediator"),
        ("Role", "gpu-remediator-leases"),
        ("RoleBinding", "gpu-remediator-leases"),
        ("ConfigMap", "gpu-remediator-rules"),
        ("ConfigMap", "gpu-remediator-playbooks"),
        ("Deployment", "gpu-remediator"),
        ("Service", "gpu-remediator"),
        ("DaemonSet", "gpu-remediator-sidecar"),
        ("NetworkPolicy", "gpu-remediator-sidecar"),
        ("NetworkPolicy", "gpu-remediator"),
    }
    kinds = {
        name: {(o["kind"], o["metadata"]["name"]) for o in rendered(path)} for name, path in OVERLAYS.items()
    }
    assert kinds["single"] == common | {("PersistentVolumeClaim", "gpu-remediator-data")}
    assert kinds["ha"] == common | {("PodDisruptionBudget", "gpu-remediator")}


def test_namespaced_objects_live_in_gpu_remediator(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    for obj in objects:
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']}"


def test_every_container_runs_the_released_image(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    for workload in (controller(objects), sidecar(objects)):
        spec = pod_spec(workload)
        for container in spec.get("initContainers", []) + spec["containers"]:
            assert container["image"] == IMAGE, container["name"]


# -- RBAC ------------------------------------------------------------------------------------------


def test_cluster_role_grants_exactly_the_documented_verbs(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    assert grants(only(objects, "ClusterRole", "gpu-remediator")) == EXPECTED_CLUSTER_GRANTS


def test_lease_role_is_namespaced_and_minimal(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    role = only(objects, "Role", "gpu-remediator-leases")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role) == EXPECTED_NAMESPACE_GRANTS
    assert sorted(o["metadata"]["name"] for o in objects if o["kind"] in ("Role", "ClusterRole")) == [
        "gpu-remediator",
        "gpu-remediator-leases",
    ]


def test_roles_are_bound_to_the_controller_service_account_only(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    for kind, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = only(objects, kind)
        assert binding["roleRef"]["kind"] == role
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gpu-remediator", "namespace": NAMESPACE}
        ]
    assert pod_spec(controller(objects))["serviceAccountName"] == "gpu-remediator"
    side_sa = only(objects, "ServiceAccount", "gpu-remediator-sidecar")
    assert side_sa["automountServiceAccountToken"] is False
    assert pod_spec(sidecar(objects))["serviceAccountName"] == "gpu-remediator-sidecar"
    assert pod_spec(sidecar(objects))["automountServiceAccountToken"] is False


def test_rbac_is_rendered_from_the_kind_table(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    assert render_definitions.RBAC.read_text() == render_definitions.render_rbac(), (
        "run: python deploy/render_definitions.py"
    )
    assert grants(only(objects, "ClusterRole", "gpu-remediator")) == set(kube_kinds.cluster_grants())
    assert grants(only(objects, "Role", "gpu-remediator-leases")) == set(kube_kinds.namespace_grants())


def test_the_kind_table_grants_every_verb_of_each_kind_it_lists() -> None:
    table = {grant for kind in kube_kinds.KINDS for grant in kind.grants()}
    assert table <= EXPECTED_CLUSTER_GRANTS
    assert EXPECTED_CLUSTER_GRANTS - table == set(kube_kinds.UNCALLED_CLUSTER_GRANTS)


def test_docs_table_lists_every_granted_verb() -> None:
    text = (ROOT / "docs" / "deploy.md").read_text()
    rows = re.findall(
        r"^\|\s*`([^`]*)`\s*\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|\s*[^|]*\S[^|]*\|\s*$", text, re.M
    )
    documented = {("" if group == "core" else group, resource, verb) for group, resource, verb in rows}
    assert documented == EXPECTED_CLUSTER_GRANTS | EXPECTED_NAMESPACE_GRANTS


# -- controller ------------------------------------------------------------------------------------


def test_controller_runs_locked_down(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    spec = pod_spec(controller(objects))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not spec.get("hostPID") and not spec.get("hostNetwork")
    for container in spec["initContainers"] + spec["containers"]:
        ctx = container["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True, container["name"]
        assert ctx["allowPrivilegeEscalation"] is False, container["name"]
        assert ctx["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert not ctx.get("privileged")
        for key in ("requests", "limits"):
            assert set(container["resources"][key]) == {"cpu", "memory"}, (container["name"], key)


def test_controller_command_ports_and_probes(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    spec = pod_spec(controller(objects))
    (main,) = spec["containers"]
    assert main["args"] == ["serve", "--host", "0.0.0.0", "--port", "8080"]
    assert main["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    (init,) = spec["initContainers"]
    assert init["args"] == ["db", "upgrade"]


def test_controller_settings_come_from_the_right_places(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    spec = pod_spec(controller(objects))
    (main,) = spec["containers"]
    env = env_of(main)
    fields = {name.upper() for name in Settings.model_fields}
    for container in spec["initContainers"] + spec["containers"]:
        for name in env_of(container):
            assert name.startswith("REMEDIATOR_") and name.removeprefix("REMEDIATOR_") in fields, name
    for name, key in (
        ("REMEDIATOR_WEBHOOK_TOKEN", "webhook-token"),
        ("REMEDIATOR_SIDECAR_TOKEN", "sidecar-token"),
        ("REMEDIATOR_SECRET_KEY", "secret-key"),
        ("REMEDIATOR_AUDIT_KEY", "audit-key"),
    ):
        assert env[name]["valueFrom"] == {"secretKeyRef": {"name": "gpu-remediator-tokens", "key": key}}
    assert env["REMEDIATOR_OWN_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["REMEDIATOR_SIDECAR_PORT"]["value"] == "9410"
    (init,) = spec["initContainers"]
    assert env_of(init)["REMEDIATOR_DATABASE_URL"] == env["REMEDIATOR_DATABASE_URL"]


@pytest.mark.parametrize("kind", ["rules", "playbooks"])
def test_definitions_are_mounted_from_configmaps(overlay: tuple[str, Objects], kind: str) -> None:
    _, objects = overlay
    spec = pod_spec(controller(objects))
    (main,) = spec["containers"]
    path = f"/etc/remediator/{kind}"
    assert env_of(main)[f"REMEDIATOR_{kind.upper()}_DIR"]["value"] == path
    (mount,) = [m for m in main["volumeMounts"] if m["mountPath"] == path]
    assert mount.get("readOnly") is True and "subPath" not in mount
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    only(objects, "ConfigMap", volume["configMap"]["name"])


@pytest.mark.parametrize("kind", render_definitions.KINDS)
def test_definition_configmaps_match_the_shipped_definitions(kind: str) -> None:
    shipped = render_definitions.target(kind).read_text()
    assert shipped == render_definitions.render(kind), "run: python deploy/render_definitions.py"
    (configmap,) = [
        o for o in rendered(OVERLAYS["single"]) if o["metadata"]["name"] == f"gpu-remediator-{kind}"
    ]
    assert (configmap.get("data") or {}) == render_definitions.source_files(kind)


def test_single_overlay_keeps_sqlite_on_a_volume() -> None:
    objects = rendered(OVERLAYS["single"])
    deployment = controller(objects)
    spec = pod_spec(deployment)
    (main,) = spec["containers"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert env_of(main)["REMEDIATOR_DATABASE_URL"]["value"] == "sqlite+aiosqlite:////data/remediator.db"
    assert "REMEDIATOR_ALLOW_MULTIPLE_REPLICAS" not in env_of(main)
    # Webhooks and decisions in two processes, serve's default on a SQLite file (no setting needed): the
    # container may use two cores and holds two Pythons.
    assert "REMEDIATOR_WORKER_PROCESS" not in env_of(main)
    url = env_of(main)["REMEDIATOR_DATABASE_URL"]["value"]
    assert resolve_worker_process(Settings(database_url=url, worker_process=None)).worker_process is True
    assert main["resources"]["limits"] == {"cpu": "2", "memory": "1Gi"}
    assert main["resources"]["requests"] == {"cpu": "1", "memory": "512Mi"}
    for container in spec["initContainers"] + spec["containers"]:
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/data"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        claim = only(objects, "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_ha_overlay_spreads_two_replicas_over_postgresql() -> None:
    objects = rendered(OVERLAYS["ha"])
    deployment = controller(objects)
    spec = pod_spec(deployment)
    (main,) = spec["containers"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    env = env_of(main)
    assert deployment["spec"]["replicas"] == 2
    assert env["REMEDIATOR_DATABASE_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "gpu-remediator-database", "key": "url"}
    }
    assert env["REMEDIATOR_ALLOW_MULTIPLE_REPLICAS"]["value"] == "true"
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert selects(term["labelSelector"]["matchLabels"], labels)
    pdb = only(objects, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    assert 0 < pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    assert not any(v.get("persistentVolumeClaim") for v in spec["volumes"])
    assert "sqlite" not in str(deployment)


def test_service_reaches_the_controller_and_nothing_else(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    service = only(objects, "Service", "gpu-remediator")
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}
    ]
    assert selects(service["spec"]["selector"], controller(objects)["spec"]["template"]["metadata"]["labels"])
    assert not selects(
        service["spec"]["selector"], sidecar(objects)["spec"]["template"]["metadata"]["labels"]
    )


# -- sidecar ---------------------------------------------------------------------------------------


def test_sidecar_lands_on_every_gpu_node_even_quarantined_ones(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    spec = pod_spec(sidecar(objects))
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    tolerations = {t["key"]: t for t in spec["tolerations"]}
    for key in ("remediator.io/gpu-unhealthy", "nvidia.com/gpu"):
        assert tolerations[key] == {"key": key, "operator": "Exists"}, "must tolerate every effect"
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["hostPID"] is True
    assert not spec.get("hostNetwork")


def test_sidecar_mounts_kubelet_state_read_only(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    spec = pod_spec(sidecar(objects))
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    pod_resources = mounts["/var/lib/kubelet/pod-resources"]
    assert pod_resources["readOnly"] is True
    assert volumes[pod_resources["name"]]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    writable_host_paths = [
        volumes[m["name"]]["hostPath"]["path"]
        for m in container["volumeMounts"]
        if "hostPath" in volumes[m["name"]] and not m.get("readOnly")
    ]
    assert writable_host_paths == ["/var/lib/gpu-remediator"]
    env = env_of(container)
    assert env["REMEDIATOR_STATE_FILE"]["value"].startswith("/var/lib/gpu-remediator/")
    assert env["REMEDIATOR_PODRESOURCES_SOCKET"]["value"].startswith("/var/lib/kubelet/pod-resources/")
    checkpoint_dir = env["REMEDIATOR_DEVICE_CHECKPOINT"]["value"].rsplit("/", 1)[0]
    assert mounts[checkpoint_dir]["readOnly"] is True


def test_sidecar_command_token_and_settings(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    (container,) = pod_spec(sidecar(objects))["containers"]
    assert container["args"] == ["sidecar", "--host", "0.0.0.0", "--port", "9410"]
    assert container["ports"] == [
        {"name": "http", "containerPort": 9410, "hostPort": 9410, "protocol": "TCP"}
    ]
    env = env_of(container)
    assert env["REMEDIATOR_SIDECAR_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "gpu-remediator-tokens", "key": "sidecar-token"}
    }
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    fields = {name.upper() for name in SidecarSettings.model_fields}
    for name in env:
        if name.startswith("REMEDIATOR_"):
            assert name.removeprefix("REMEDIATOR_") in fields, name
    for key in ("requests", "limits"):
        assert set(container["resources"][key]) == {"cpu", "memory"}


def test_sidecar_privileges_are_bounded(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    spec = pod_spec(sidecar(objects))
    (container,) = spec["containers"]
    ctx = container["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    if ctx.get("privileged"):
        assert "privileged: true" in (ROOT / "docs" / "deploy.md").read_text()
    else:
        assert set(ctx.get("capabilities", {}).get("add", [])) <= {"SYS_ADMIN"}
        assert ctx["capabilities"]["drop"] == ["ALL"]


def test_network_policy_admits_only_the_controller_on_9410(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    policy = only(objects, "NetworkPolicy", "gpu-remediator-sidecar")
    controller_labels = controller(objects)["spec"]["template"]["metadata"]["labels"]
    sidecar_labels = sidecar(objects)["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"] == {"matchLabels": SIDECAR_LABELS}
    assert selects(policy["spec"]["podSelector"]["matchLabels"], sidecar_labels)
    assert not selects(policy["spec"]["podSelector"]["matchLabels"], controller_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rule, scrape = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9410}]
    (peer,) = rule["from"]
    assert peer == {"podSelector": {"matchLabels": CONTROLLER_LABELS}}, "no namespaceSelector or ipBlock"
    assert selects(peer["podSelector"]["matchLabels"], controller_labels)
    assert not selects(peer["podSelector"]["matchLabels"], sidecar_labels)
    # the second rule admits only Prometheus (the PodMonitor's scrapes), never every pod of a namespace
    assert scrape["ports"] == [{"protocol": "TCP", "port": 9410}]
    (prometheus,) = scrape["from"]
    assert set(prometheus) == {"namespaceSelector", "podSelector"}, "no ipBlock, no bare namespace"
    assert prometheus["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}


# What each peer of the controller's policy is, by the pod label it selects (docs/deploy.md lists them).
CONTROLLER_PEERS = {"alertmanager": "monitoring", "prometheus": "monitoring", "ingress-nginx": "ingress-nginx"}


def test_network_policy_admits_only_alertmanager_prometheus_and_the_ingress_to_the_controller(
    overlay: tuple[str, Objects],
) -> None:
    _, objects = overlay
    policy = only(objects, "NetworkPolicy", "gpu-remediator")
    controller_labels = controller(objects)["spec"]["template"]["metadata"]["labels"]
    sidecar_labels = sidecar(objects)["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"] == {"matchLabels": CONTROLLER_LABELS}
    assert selects(policy["spec"]["podSelector"]["matchLabels"], controller_labels)
    assert not selects(policy["spec"]["podSelector"]["matchLabels"], sidecar_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    (main,) = pod_spec(controller(objects))["containers"]
    (http,) = main["ports"]
    assert rule["ports"] == [{"protocol": "TCP", "port": http["containerPort"]}]
    assert "--port" in main["args"] and main["args"][main["args"].index("--port") + 1] == str(http["containerPort"])
    peers = {}
    for peer in rule["from"]:
        # Each peer is one set of pods in one namespace: no ipBlock, no empty (match-all) selector.
        assert set(peer) == {"namespaceSelector", "podSelector"}, peer
        (namespace,) = peer["namespaceSelector"]["matchLabels"].items()
        assert namespace[0] == "kubernetes.io/metadata.name"
        (pod_label,) = peer["podSelector"]["matchLabels"].items()
        assert pod_label[0] == "app.kubernetes.io/name"
        peers[pod_label[1]] = namespace[1]
    assert peers == CONTROLLER_PEERS
    guide = (ROOT / "docs" / "deploy.md").read_text()
    for name, namespace in CONTROLLER_PEERS.items():
        assert f"`app.kubernetes.io/name: {name}`" in guide and f"`{namespace}`" in guide


def test_sidecar_port_matches_the_controller_setting(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    (main,) = pod_spec(controller(objects))["containers"]
    (side,) = pod_spec(sidecar(objects))["containers"]
    port = int(env_of(main)["REMEDIATOR_SIDECAR_PORT"]["value"])
    assert side["ports"][0]["hostPort"] == port
    assert only(objects, "NetworkPolicy", "gpu-remediator-sidecar")["spec"]["ingress"][0]["ports"][0]["port"] == port


def test_definitions_load_from_the_configmap_volumes(tmp_path: Path) -> None:
    from remediator.actions.registry import default_registry
    from remediator.definitions import load_definitions
    from remediator.engine.bootstrap import action_params
    from remediator.settings import BUNDLED_DIR

    objects = rendered(OVERLAYS["single"])
    dirs = {}
    for kind in render_definitions.KINDS:
        configmap = only(objects, "ConfigMap", f"gpu-remediator-{kind}")
        volume = tmp_path / kind
        payload = volume / "..2026_01_01_00_00_00.000000001"
        payload.mkdir(parents=True)
        (volume / "..data").symlink_to(payload.name)
        for key, text in (configmap.get("data") or {}).items():
            (payload / key).write_text(text)
            (volume / key).symlink_to(f"..data/{key}")
        dirs[kind] = volume
    params = action_params(default_registry())
    mounted = load_definitions(dirs["rules"], dirs["playbooks"], params)
    bundled = load_definitions(BUNDLED_DIR / "rules", BUNDLED_DIR / "playbooks", params)
    assert [r.name for r in mounted.rules] == [r.name for r in bundled.rules]
    assert mounted.version == bundled.version
