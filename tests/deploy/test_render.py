"""The test renderer behaves like kustomize for the features deploy/ uses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.render import RenderError, _image_name, build, strategic_merge

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "app"},
    "spec": {
        "replicas": 1,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "app",
                        "args": ["a", "b"],
                        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    },
                    {"name": "other", "image": "registry.local:5000/team/other:1.0"},
                ],
                "volumes": [{"name": "tmp", "emptyDir": {}}],
            }
        },
    },
}


def write(directory: Path, name: str, *docs: object) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(yaml.safe_dump_all(docs))


def test_strategic_merge_merges_keyed_lists_and_replaces_the_rest() -> None:
    patch = {
        "spec": {
            "replicas": 2,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "args": ["c"],
                            "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
                        }
                    ],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                }
            },
        }
    }
    merged = strategic_merge(DEPLOYMENT, patch)
    main, other = merged["spec"]["template"]["spec"]["containers"]
    assert merged["spec"]["replicas"] == 2
    assert main["args"] == ["c"]
    assert main["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "two"},
        {"name": "C", "value": "3"},
    ]
    assert main["volumeMounts"] == [{"name": "scratch", "mountPath": "/tmp"}]
    assert other == DEPLOYMENT["spec"]["template"]["spec"]["containers"][1]
    assert [v["name"] for v in merged["spec"]["template"]["spec"]["volumes"]] == ["tmp", "data"]
    assert DEPLOYMENT["spec"]["replicas"] == 1, "the base is not modified"


def test_strategic_merge_null_deletes() -> None:
    merged = strategic_merge({"a": 1, "b": {"c": 2}}, {"b": None})
    assert merged == {"a": 1}


@pytest.mark.parametrize(
    ("reference", "name"),
    [
        ("app", "app"),
        ("app:1.0", "app"),
        ("registry.local:5000/team/app", "registry.local:5000/team/app"),
        ("registry.local:5000/team/app:1.0@sha256:abc", "registry.local:5000/team/app"),
    ],
)
def test_image_names(reference: str, name: str) -> None:
    assert _image_name(reference) == name


def test_build_applies_resources_patches_images_and_namespace(tmp_path: Path) -> None:
    base = tmp_path / "base"
    write(
        base,
        "app.yaml",
        DEPLOYMENT,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "app"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "app"},
            "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": "x"}],
        },
    )
    write(
        base,
        "kustomization.yaml",
        {
            "resources": ["app.yaml"],
            "namespace": "ns",
            "images": [{"name": "app", "newName": "example.org/app", "newTag": "9"}],
        },
    )
    overlay = tmp_path / "overlay"
    write(
        overlay,
        "patch.yaml",
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"}, "spec": {"replicas": 3}},
    )
    write(overlay, "kustomization.yaml", {"resources": ["../base"], "patches": [{"path": "patch.yaml"}]})
    deployment, binding = build(overlay)
    assert deployment["metadata"]["namespace"] == "ns"
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "example.org/app:9"
    assert (
        deployment["spec"]["template"]["spec"]["containers"][1]["image"]
        == "registry.local:5000/team/other:1.0"
    )
    assert "namespace" not in binding["metadata"]
    assert binding["subjects"][0]["namespace"] == "ns"


def test_build_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    write(tmp_path, "kustomization.yaml", {"resources": [], "commonLabels": {"a": "b"}})
    with pytest.raises(RenderError, match="commonLabels"):
        build(tmp_path)


def test_build_refuses_a_patch_without_a_target(tmp_path: Path) -> None:
    write(tmp_path, "app.yaml", DEPLOYMENT)
    write(
        tmp_path, "patch.yaml", {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nope"}}
    )
    write(tmp_path, "kustomization.yaml", {"resources": ["app.yaml"], "patches": [{"path": "patch.yaml"}]})
    with pytest.raises(RenderError, match="matches 0 objects"):
        build(tmp_path)


def test_config_map_generator(tmp_path: Path) -> None:
    (tmp_path / "board.json").write_text("{}\n")
    write(
        tmp_path,
        "kustomization.yaml",
        {
            "configMapGenerator": [
                {
                    "name": "dash",
                    "files": ["d.json=board.json"],
                    "literals": ["k=v"],
                    "options": {"disableNameSuffixHash": True, "labels": {"l": "1"}},
                }
            ]
        },
    )
    (configmap,) = build(tmp_path)
    assert configmap["data"] == {"d.json": "{}\n", "k": "v"}
    assert configmap["metadata"] == {"name": "dash", "labels": {"l": "1"}}
