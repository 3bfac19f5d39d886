"""deploy/kubernetes renders and holds together: every overlay through `kubectl kustomize`, every object against
the Kubernetes schemas (kubernetes-validate, offline, strict), and against the code: each container is given
exactly the variables its settings read, probes on /ready and /health, resources, disruption budgets, who may
reach whom. No cluster runs here; what a cluster would refuse or misroute is what these tests look for."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic_settings import BaseSettings

from ragkb_api.settings import ApiSettings
from ragkb_core.settings_doc import env_variables
from ragkb_retriever.settings import RetrieverSettings
from ragkb_store.db.__main__ import _MigrateSettings
from ragkb_store.queue import INGEST_QUEUE, broker_lists
from ragkb_store.states import Lane
from ragkb_worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
OVERLAYS = ("dev", "production", "production+keda")
# The oldest Kubernetes minor version still supported upstream, and the newest the schemas know.
KUBERNETES_VERSIONS = ("1.30", kubernetes_validate.latest_version())
SERVICES: dict[str, type[BaseSettings]] = {
    "api": ApiSettings,
    "worker": WorkerSettings,
    "retriever": RetrieverSettings,
    "ragkb-migrate": _MigrateSettings,
}
Obj = dict[str, Any]


def kustomize(directory: Path, *options: str) -> list[Obj]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed to render deploy/kubernetes (`kubectl kustomize` works offline)"
    command = [kubectl, "kustomize", *options, str(directory)]
    rendered = subprocess.run(command, capture_output=True, text=True, check=False)
    assert rendered.returncode == 0, rendered.stderr
    return [obj for obj in yaml.safe_load_all(rendered.stdout) if obj]


def render(overlay: str, scratch: Path) -> list[Obj]:
    if overlay != "production+keda":
        return kustomize(KUBERNETES / overlay_path(overlay))
    # Production with the optional component enabled, as an operator does it: its kustomization plus
    # `components`, written elsewhere with its paths made relative to there (kustomize refuses absolute ones).
    production = KUBERNETES / overlay_path("production")
    kustomization = yaml.safe_load((production / "kustomization.yaml").read_text())
    kustomization["resources"] = [os.path.relpath(production / path, scratch) for path in kustomization["resources"]]
    kustomization["components"] = [os.path.relpath(KUBERNETES / "components" / "keda", scratch)]
    (scratch / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    # The overlay's own files are outside the scratch folder: allowed for this render only.
    return kustomize(scratch, "--load-restrictor", "LoadRestrictionsNone")


def overlay_path(name: str) -> Path:
    return Path("overlays") / name


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Obj]]:
    scratch = tmp_path_factory.mktemp("production-keda")
    return {overlay: render(overlay, scratch) for overlay in OVERLAYS}


def of_kind(objects: list[Obj], kind: str) -> dict[str, Obj]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


def workloads(objects: list[Obj]) -> dict[str, Obj]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] in ("Deployment", "StatefulSet", "Job")}


def containers(workload: Obj) -> list[Obj]:
    containers: list[Obj] = workload["spec"]["template"]["spec"]["containers"]
    return containers


def env_names(container: Obj, objects: list[Obj]) -> list[str]:
    """Every variable the container gets, from `env` and from the ConfigMaps of `envFrom`."""
    config_maps = of_kind(objects, "ConfigMap")
    names = [variable["name"] for variable in container.get("env", [])]
    for source in container.get("envFrom", []):
        names.extend(config_maps[source["configMapRef"]["name"]]["data"])
    return names


# -- schemas -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schemas(
    rendered: dict[str, list[Obj]], overlay: str, version: str
) -> None:
    for obj in rendered[overlay]:
        if obj["apiVersion"].startswith("keda.sh/"):
            continue  # a CRD kubernetes-validate has no schema for: checked in test_keda_scales_the_worker_on_its_queue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{overlay}: {obj['kind']}/{obj['metadata']['name']} invalid for {version}: {error.message}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_names_are_unique_and_everything_is_in_the_overlays_namespace(
    rendered: dict[str, list[Obj]], overlay: str
) -> None:
    objects = rendered[overlay]
    assert [key for key, n in Counter((o["kind"], o["metadata"]["name"]) for o in objects).items() if n > 1] == []
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    assert len(namespaces) == 1
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"} == namespaces


# -- the code's settings -------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("workload", sorted(SERVICES))
def test_each_service_gets_exactly_the_variables_it_reads(
    rendered: dict[str, list[Obj]], overlay: str, workload: str
) -> None:
    objects = rendered[overlay]
    (container,) = containers(workloads(objects)[workload])
    names = env_names(container, objects)
    assert [name for name, n in Counter(names).items() if n > 1] == []  # no variable given twice
    expected = {variable.name for variable in env_variables(SERVICES[workload])}
    assert sorted(expected - set(names)) == [], "read by the service but not set"
    assert sorted(set(names) - expected) == [], "set but not read by the service"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_secret_reference_is_to_a_key_of_ragkb_secrets(rendered: dict[str, list[Obj]], overlay: str) -> None:
    keys_used = set()
    for workload in workloads(rendered[overlay]).values():
        for container in containers(workload):
            for variable in container.get("env", []):
                if ref := variable.get("valueFrom", {}).get("secretKeyRef"):
                    assert ref["name"] == "ragkb-secrets"
                    keys_used.add(ref["key"])
    secrets = of_kind(rendered[overlay], "Secret")
    if overlay == "dev":
        assert keys_used <= set(secrets["ragkb-secrets"]["data"])
    else:
        # Production secrets are the operator's (README: kubectl create secret); none is rendered.
        assert secrets == {}
        readme = (KUBERNETES / "README.md").read_text()
        assert all(f"{key}=" in readme for key in keys_used - {"postgres-password"})


def test_production_uses_an_external_postgresql_and_dev_its_own(rendered: dict[str, list[Obj]]) -> None:
    assert "postgres" in workloads(rendered["dev"])
    assert "postgres" not in workloads(rendered["production"])


# -- probes, resources, disruption budgets ------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("workload", ["api", "retriever", "worker"])
def test_services_are_ready_on_ready_and_alive_on_health(
    rendered: dict[str, list[Obj]], overlay: str, workload: str
) -> None:
    (container,) = containers(workloads(rendered[overlay])[workload])
    port_names = {port["name"] for port in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert {container["readinessProbe"]["httpGet"]["port"], container["livenessProbe"]["httpGet"]["port"]} <= port_names


def _quantity(value: str | int) -> float:
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    text = str(value)
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_requests_what_it_needs_within_its_limits(rendered: dict[str, list[Obj]], overlay: str) -> None:
    for name, workload in workloads(rendered[overlay]).items():
        for container in containers(workload):
            resources = container["resources"]
            for resource in ("cpu", "memory"):
                request, limit = resources["requests"][resource], resources["limits"][resource]
                assert _quantity(request) <= _quantity(limit), f"{name}: {resource} request over its limit"


def test_measured_memory_fits_the_requests(rendered: dict[str, list[Obj]]) -> None:
    """README "Benchmarks" and deploy/kubernetes/README.md: api ≤ 120 MB PSS, retriever 1.25 GB with the
    model loaded, worker ≤ 3.0 GB PSS for two task processes."""
    deployed = workloads(rendered["production"])
    measured_mib = {"api": 120, "retriever": 1280, "worker": 3000}
    for name, mib in measured_mib.items():
        (container,) = containers(deployed[name])
        assert _quantity(container["resources"]["requests"]["memory"]) >= mib * 2**20, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_replicated_workload_has_a_disruption_budget(rendered: dict[str, list[Obj]], overlay: str) -> None:
    budgets = of_kind(rendered[overlay], "PodDisruptionBudget").values()
    for name, workload in workloads(rendered[overlay]).items():
        if workload["kind"] == "Job" or name in ("redis", "postgres"):
            continue  # one-node stores: a budget would only block node drains
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(_selects(budget["spec"]["selector"]["matchLabels"], labels) for budget in budgets), name


def _selects(match_labels: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in match_labels.items())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_select_pods_and_target_their_ports(rendered: dict[str, list[Obj]], overlay: str) -> None:
    pods = [w["spec"]["template"] for w in workloads(rendered[overlay]).values()]
    for name, service in of_kind(rendered[overlay], "Service").items():
        selected = [pod for pod in pods if _selects(service["spec"]["selector"], pod["metadata"]["labels"])]
        assert selected, f"Service {name} selects no pod"
        ports = {port["name"] for pod in selected for c in pod["spec"]["containers"] for port in c["ports"]}
        assert {port["targetPort"] for port in service["spec"]["ports"]} <= ports, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_autoscalers_scale_workloads_that_exist(rendered: dict[str, list[Obj]], overlay: str) -> None:
    deployments = of_kind(rendered[overlay], "Deployment")
    scalers = of_kind(rendered[overlay], "HorizontalPodAutoscaler")
    assert {"api", "retriever"} <= set(scalers)
    for scaler in scalers.values():
        assert scaler["spec"]["scaleTargetRef"]["name"] in deployments
        assert scaler["spec"]["minReplicas"] <= scaler["spec"]["maxReplicas"]


def test_keda_scales_the_worker_on_both_lanes(rendered: dict[str, list[Obj]]) -> None:
    (scaled,) = of_kind(rendered["production+keda"], "ScaledObject").values()
    assert scaled["spec"]["scaleTargetRef"]["name"] in of_kind(rendered["production+keda"], "Deployment")
    triggers = scaled["spec"]["triggers"]
    # Interactive messages are sent at priority 0 only (its one list); bulk ones at every priority step.
    assert [trigger["metadata"]["listName"] for trigger in triggers] == [INGEST_QUEUE, *broker_lists(Lane.BULK)]
    namespace = scaled["metadata"]["namespace"]
    for trigger in triggers:
        assert trigger["type"] == "redis"
        assert trigger["metadata"]["address"] == f"redis.{namespace}.svc.cluster.local:6379"
    assert scaled["spec"]["minReplicaCount"] >= 1  # the worker runs the sweeper
    assert "ScaledObject" not in {o["kind"] for o in rendered["production"]}  # optional


# -- Qdrant ------------------------------------------------------------------------------------------


def test_production_runs_qdrant_as_a_cluster_of_three(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["production"]
    qdrant = workloads(objects)["qdrant"]
    assert qdrant["kind"] == "StatefulSet" and qdrant["spec"]["replicas"] >= 3
    config = yaml.safe_load(of_kind(objects, "ConfigMap")["qdrant"]["data"]["production.yaml"])
    assert config["cluster"]["enabled"] is True
    script = of_kind(objects, "ConfigMap")["qdrant"]["data"]["initialize.sh"]
    assert "--bootstrap" in script and "--uri" in script
    headless = of_kind(objects, "Service")["qdrant-headless"]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert qdrant["spec"]["serviceName"] == "qdrant-headless"
    retriever_env = {v["name"]: v for v in containers(workloads(objects)["retriever"])[0]["env"]}
    assert retriever_env["RAGKB_QDRANT__URL"]["value"] == "http://qdrant:6333"


# -- who may reach whom --------------------------------------------------------------------------------


def _allowed_sources(objects: list[Obj], target: str) -> list[str | None]:
    """The app names allowed to reach `target` pods; None for a rule open to every source."""
    sources: list[str | None] = []
    for policy in of_kind(objects, "NetworkPolicy").values():
        if not _selects(policy["spec"]["podSelector"].get("matchLabels", {}), {"app.kubernetes.io/name": target}):
            continue
        for rule in policy["spec"].get("ingress", []):
            if "from" not in rule:
                sources.append(None)
            for peer in rule.get("from", []):
                labels = peer.get("podSelector", {}).get("matchLabels", {})
                namespace = peer.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")
                sources.append(labels.get("app.kubernetes.io/name") or f"namespace:{namespace}")
    return sources


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_api_is_reachable_from_outside(rendered: dict[str, list[Obj]], overlay: str) -> None:
    objects = rendered[overlay]
    deny = of_kind(objects, "NetworkPolicy")["default-deny-ingress"]
    assert deny["spec"]["podSelector"] == {} and deny["spec"]["policyTypes"] == ["Ingress"]
    for name in workloads(objects):
        opened = None in _allowed_sources(objects, name)
        assert opened == (name == "api"), name
    # Prometheus scrapes the retriever's /metrics from its own namespace (issue 23).
    assert set(_allowed_sources(objects, "retriever")) == {"api", "worker", "namespace:monitoring"}
    for service in of_kind(objects, "Service").values():
        assert service["spec"].get("type", "ClusterIP") == "ClusterIP"
    for ingress in of_kind(objects, "Ingress").values():
        backends = {
            path["backend"]["service"]["name"] for rule in ingress["spec"]["rules"] for path in rule["http"]["paths"]
        }
        assert backends == {"api"}


def test_production_images_name_a_registry_and_a_release(rendered: dict[str, list[Obj]]) -> None:
    for name in ("api", "retriever", "worker", "ragkb-migrate"):
        image = containers(workloads(rendered["production"])[name])[0]["image"]
        assert "/" in image and not image.endswith((":latest", ":dev")), image
