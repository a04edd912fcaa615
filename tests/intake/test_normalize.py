"""Normalisation of Alertmanager labels into GpuAlert: node precedence, exported_* labels, Xid sources."""

from __future__ import annotations

from remediator.intake.normalize import normalize, parse_xid

KINDS = {"GPUXidError": "xid", "GPUTemperatureHigh": "thermal", "GPUIdle": "idle"}
PRECEDENCE = ["node", "kubernetes_node", "Hostname", "instance"]


def _n(labels: dict[str, str], annotations: dict[str, str] | None = None, **kw: object) -> object:
    return normalize(
        labels, annotations or {}, status="firing", fingerprint="abc", kinds=KINDS,
        node_precedence=kw.pop("precedence", PRECEDENCE), **kw,  # type: ignore[arg-type]
    )


def test_dcgm_labels_give_node_gpu_and_kind() -> None:
    a = _n({"alertname": "GPUXidError", "Hostname": "gpu-node-1", "UUID": "GPU-1234", "gpu": "3",
            "modelName": "NVIDIA H200", "pci_bus_id": "00000000:1B:00.0", "xid": "79"})
    assert a.node == "gpu-node-1" and a.node_source == "Hostname"
    assert a.gpu_uuid == "GPU-1234" and a.gpu_index == "3" and a.model == "NVIDIA H200"
    assert a.pci_bus_id == "00000000:1B:00.0"
    assert a.kind == "xid" and a.xid == 79


def test_node_label_wins_over_hostname_and_instance_port_is_stripped() -> None:
    assert _n({"alertname": "X", "node": "n1", "Hostname": "h"}).node == "n1"
    a = _n({"alertname": "X", "instance": "127.0.0.5:9400"})
    assert a.node == "127.0.0.5" and a.node_source == "instance"


def test_instance_ip_resolves_to_node_name() -> None:
    a = _n({"alertname": "X", "instance": "127.0.0.7:9400"}, nodes_by_ip={"127.0.0.7": "gpu-7"})
    assert a.node == "gpu-7"


def test_precedence_is_configurable() -> None:
    a = _n({"alertname": "X", "node": "n1", "Hostname": "h1"}, precedence=["Hostname", "node"])
    assert a.node == "h1"


def test_exported_labels_win_over_scrape_target_labels() -> None:
    a = _n({"alertname": "GPUIdle", "pod": "dcgm-exporter-abc", "exported_pod": "trainer-0",
            "namespace": "gpu-operator", "exported_namespace": "ml", "container": "exporter",
            "exported_container": "main"})
    assert (a.pod, a.namespace, a.container) == ("trainer-0", "ml", "main")
    assert a.kind == "idle"


def test_unknown_alertname_is_other_and_missing_node_is_none() -> None:
    a = _n({"alertname": "SomethingElse"})
    assert a.kind == "other" and a.node is None


def test_xid_from_label_then_value_annotation() -> None:
    assert parse_xid({"xid": "48"}, {}) == 48
    assert parse_xid({}, {"value": "79"}) == 79
    assert parse_xid({}, {"value": "79.0"}) == 79
    assert parse_xid({"xid": "not-a-number"}, {}) is None
    assert parse_xid({}, {}) is None


def test_the_main_branchs_lower_case_hostname_names_the_node_by_default() -> None:
    from remediator.settings import Settings

    precedence = Settings().node_label_precedence
    a = _n({"alertname": "GPUXidError", "hostname": "gpu-node-2", "UUID": "GPU-1", "gpu": "0", "xid": "13"},
           precedence=precedence)
    assert a.node == "gpu-node-2" and a.node_source == "hostname"
    # a released exporter's Hostname still works, and wins when both are there
    assert _n({"alertname": "X", "Hostname": "h1", "hostname": "h2"}, precedence=precedence).node == "h1"


def test_the_exporters_own_pod_is_never_the_workload() -> None:
    # honorLabels false, GPU held by no pod: pod/namespace/container are dcgm-exporter's own
    a = _n({"alertname": "GPUIdle", "Hostname": "n", "pod": "nvidia-dcgm-exporter-7x2kq",
            "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter"})
    assert (a.pod, a.namespace, a.container) == (None, None, None)
    b = _n({"alertname": "GPUIdle", "Hostname": "n", "pod": "dcgm-exporter-abcde", "namespace": "monitoring"})
    assert b.pod is None
    # honorLabels true: pod is the workload's
    c = _n({"alertname": "GPUIdle", "Hostname": "n", "pod": "trainer-0", "namespace": "ml", "container": "main"})
    assert (c.pod, c.namespace, c.container) == ("trainer-0", "ml", "main")
    # the prefixes are a setting
    d = _n({"alertname": "GPUIdle", "pod": "my-exporter-1", "namespace": "mon"}, exporter_pod_prefixes=["my-exporter-"])
    assert d.pod is None


def test_the_stored_form_is_what_asdict_gives_with_its_own_label_maps() -> None:
    from dataclasses import asdict

    # Exactly the labels and annotations the shipped GPUXidError rule (deploy/monitoring) delivers.
    labels = {"alertname": "GPUXidError", "severity": "critical", "Hostname": "gpu-node-1",
              "UUID": "GPU-8e6a1c2d-0000-4000-8000-000000000001", "gpu": "1", "pci_bus_id": "00000000:1B:00.0",
              "xid": "79"}
    annotations = {
        "summary": "GPU 1 (GPU-8e6a1c2d-0000-4000-8000-000000000001) on gpu-node-1 reported Xid 79",
        "description": "GPU 1 (00000000:1B:00.0) of gpu-node-1 reported Xid 79; it stays lost until the node is "
                       "rebooted",
    }
    alert = _n(labels, annotations)
    stored = alert.as_json()  # type: ignore[attr-defined]
    assert stored == asdict(alert)  # type: ignore[call-overload]
    assert list(stored) == list(asdict(alert))  # type: ignore[call-overload]
    stored["labels"]["xid"] = "48"
    assert alert.labels["xid"] == "79"  # type: ignore[attr-defined]
