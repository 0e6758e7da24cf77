"""The Kubernetes recipes in docs/deploy/ are valid, and fit together.

Every manifest is checked offline against the Kubernetes API schemas that kubernetes-validate (PyPI)
bundles, strictly (an unknown field is an error). The LeaderWorkerSet is a CRD that the bundle lacks:
its structure is checked against the schema shipped beside it (docs/deploy/schemas/), and its pod
templates as core v1 PodTemplates. Then what ties them together: the router's selector matches the
servers' pods, its Role lets it watch them, and every Secret a pod names is defined.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

kubernetes_validate = pytest.importorskip("kubernetes_validate")
yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

DEPLOY = Path(__file__).resolve().parent.parent / "docs" / "deploy"
K8S = "1.33.0"


def documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def pod_specs(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(labels, pod spec) of every pod template in ``doc``."""
    spec = doc.get("spec", {})
    if doc["kind"] == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        templates = [lwt[k] for k in ("leaderTemplate", "workerTemplate") if k in lwt]
    elif "template" in spec:
        templates = [spec["template"]]
    else:
        templates = []
    return [(t.get("metadata", {}).get("labels", {}), t["spec"]) for t in templates]


@pytest.mark.parametrize("name,doc", documents(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_manifest_is_valid_kubernetes(name: str, doc: dict[str, Any]) -> None:
    if doc["kind"] == "LeaderWorkerSet":
        schema = json.loads((DEPLOY / "schemas" / "leaderworkerset-v1.json").read_text())
        jsonschema.validate(doc, schema)
        for labels, spec in pod_specs(doc):
            template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                        "template": {"metadata": {"labels": labels}, "spec": spec}}
            kubernetes_validate.validate(template, K8S, strict=True)
        return
    kubernetes_validate.validate(doc, K8S, strict=True)


def test_a_misspelt_field_is_caught() -> None:
    """The check is strict: it would catch a typo, so a green run means something."""
    _, router = next((n, d) for n, d in documents() if d["kind"] == "Deployment")
    broken = json.loads(json.dumps(router))
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S, strict=True)


def test_router_discovers_the_servers_it_may_watch() -> None:
    docs = [d for _, d in documents()]
    router = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "sglang-router")
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--service-discovery" in args
    selector = dict(a.split("=", 1) for a in args[args.index("--selector") + 1:] if not a.startswith("--")
                    and "=" in a and ":" not in a)
    servers = [labels for d in docs for labels, _ in pod_specs(d) if labels.get("app") == selector["app"]]
    assert len(servers) == 2  # the 8-GPU server's pods and the multi-node server's leader, not its workers
    role = next(d for d in docs if d["kind"] == "Role")
    assert {"list", "watch"} <= set(role["rules"][0]["verbs"]) and role["rules"][0]["resources"] == ["pods"]
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["subjects"][0]["name"] == router["spec"]["template"]["spec"]["serviceAccountName"]


def test_every_secret_a_pod_names_is_defined() -> None:
    docs = [d for _, d in documents()]
    defined = {d["metadata"]["name"]: set(d["stringData"]) for d in docs if d["kind"] == "Secret"}
    for doc in docs:
        for _, spec in pod_specs(doc):
            for volume in spec.get("volumes", []):
                if "secret" in volume:
                    assert volume["secret"]["secretName"] in defined
            for container in spec["containers"]:
                for env in container.get("env", []):
                    ref = env.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        assert ref["key"] in defined[ref["name"]]
