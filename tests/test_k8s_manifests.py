"""The manifests in ``k8s/`` as an operator applies them.

Both kustomizations (``k8s`` and ``k8s/provision``) are rendered with
``kubectl kustomize``; every built-in object is validated against the
Kubernetes 1.37 schemas (``kubernetes-validate``, strict: an unknown field is
an error), and the custom resources that package cannot know (KEDA
``ScaledObject``, CloudNativePG ``Cluster`` and ``Database``) are checked
against the fields their documentation lists. Then the invariants that make
the tree safe to run: probes on the plaintext health port (the HTTP
gateway's on its ``/healthz``), non-root pods on a read-only root filesystem,
a PodDisruptionBudget and a ServiceAccount per service and for the gateway,
only admission's gRPC port and the gateway's HTTP port reachable from outside
the namespace, the gateway dialling only DNS, admission and the OTLP
collector, every metrics port scraped by the PodMonitor and reachable from
Prometheus alone, a 3-node NATS with ``sync_interval: always`` that KEDA can
query per server, one database per service, and no Secret in the tree.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from opentelemetry.sdk import environment_variables as otel_variables

from quire.environment import known
from quire.gateway.config import DEFAULT_PORT as GATEWAY_PORT
from quire.gateway.config import SERVICE as GATEWAY
from quire.gateway.config import GatewaySettings
from quire.pipeline import STAGES
from quire.settings import DEFAULT_PORTS, HEALTH_PORT_OFFSET, METRICS_PORT_OFFSET, SERVICES
from quire.workqueue.topology import (
    EVENTS_CONSUMER,
    EVENTS_STREAM,
    PRIORITIES,
    WORK_STREAM,
    consumer_name,
    priority_shares,
)

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "k8s"
TREES = (K8S, K8S / "provision")
KUBERNETES_VERSION = "1.37.0"
NAMESPACE = "quire"
Doc = dict[str, Any]

# Custom resources, checked below against their documented fields.
CRD_GROUPS = {"keda.sh", "postgresql.cnpg.io"}

# KEDA ScaledObject (keda.sh/v1alpha1), https://keda.sh/docs/latest/reference/scaledobject-spec/
SCALED_OBJECT_SPEC_KEYS = {
    "scaleTargetRef",
    "pollingInterval",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "idleReplicaCount",
    "minReplicaCount",
    "maxReplicaCount",
    "fallback",
    "advanced",
    "triggers",
}
SCALE_TARGET_KEYS = {"apiVersion", "kind", "name", "envSourceContainerName"}
ADVANCED_KEYS = {
    "restoreToOriginalReplicaCount",
    "horizontalPodAutoscalerConfig",
    "scalingModifiers",
}
HPA_CONFIG_KEYS = {"name", "behavior"}
TRIGGER_KEYS = {"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"}
# The nats-jetstream scaler, https://keda.sh/docs/latest/scalers/nats-jetstream/
NATS_JETSTREAM_METADATA = {
    "natsServerMonitoringEndpoint",
    "account",
    "stream",
    "consumer",
    "lagThreshold",
    "activationLagThreshold",
    "useHttps",
}
NATS_JETSTREAM_REQUIRED = {"natsServerMonitoringEndpoint", "account", "stream", "consumer"}

# CloudNativePG (postgresql.cnpg.io/v1), https://cloudnative-pg.io/documentation/current/cloudnative-pg.v1/
CNPG_CLUSTER_SPEC_KEYS = {
    "description",
    "inheritedMetadata",
    "imageName",
    "imageCatalogRef",
    "imagePullPolicy",
    "schedulerName",
    "postgresUID",
    "postgresGID",
    "instances",
    "minSyncReplicas",
    "maxSyncReplicas",
    "postgresql",
    "replicationSlots",
    "bootstrap",
    "replica",
    "superuserSecret",
    "enableSuperuserAccess",
    "certificates",
    "imagePullSecrets",
    "storage",
    "serviceAccountTemplate",
    "walStorage",
    "ephemeralVolumeSource",
    "startDelay",
    "stopDelay",
    "smartShutdownTimeout",
    "switchoverDelay",
    "failoverDelay",
    "livenessProbeTimeout",
    "affinity",
    "topologySpreadConstraints",
    "resources",
    "ephemeralVolumesSizeLimit",
    "priorityClassName",
    "primaryUpdateStrategy",
    "primaryUpdateMethod",
    "backup",
    "nodeMaintenanceWindow",
    "monitoring",
    "externalClusters",
    "logLevel",
    "projectedVolumeTemplate",
    "env",
    "envFrom",
    "managed",
    "seccompProfile",
    "tablespaces",
    "enablePDB",
    "plugins",
    "probes",
}
CNPG_POSTGRESQL_KEYS = {
    "parameters",
    "synchronous",
    "pg_hba",
    "pg_ident",
    "syncReplicaElectionConstraint",
    "shared_preload_libraries",
    "ldap",
    "promotionTimeout",
    "enableAlterSystem",
    "extensions",
}
CNPG_SYNCHRONOUS_KEYS = {
    "method",
    "number",
    "maxStandbyNamesFromCluster",
    "standbyNamesPre",
    "standbyNamesPost",
    "dataDurability",
}
CNPG_INITDB_KEYS = {
    "database",
    "owner",
    "secret",
    "options",
    "dataChecksums",
    "encoding",
    "localeCollate",
    "localeCType",
    "locale",
    "localeProvider",
    "icuLocale",
    "icuRules",
    "builtinLocale",
    "walSegmentSize",
    "postInitSQL",
    "postInitApplicationSQL",
    "postInitTemplateSQL",
    "import",
    "postInitApplicationSQLRefs",
    "postInitTemplateSQLRefs",
    "postInitSQLRefs",
}
CNPG_ROLE_KEYS = {
    "name",
    "comment",
    "ensure",
    "passwordSecret",
    "connectionLimit",
    "validUntil",
    "inRoles",
    "inherit",
    "disablePassword",
    "superuser",
    "createdb",
    "createrole",
    "login",
    "replication",
    "bypassrls",
}
CNPG_AFFINITY_KEYS = {
    "enablePodAntiAffinity",
    "topologyKey",
    "nodeSelector",
    "nodeAffinity",
    "tolerations",
    "podAntiAffinityType",
    "additionalPodAntiAffinity",
    "additionalPodAffinity",
}
CNPG_DATABASE_SPEC_KEYS = {
    "cluster",
    "ensure",
    "name",
    "owner",
    "template",
    "encoding",
    "locale",
    "localeProvider",
    "localeCollate",
    "localeCType",
    "icuLocale",
    "icuRules",
    "builtinLocale",
    "collationVersion",
    "isTemplate",
    "allowConnections",
    "connectionLimit",
    "tablespace",
    "databaseReclaimPolicy",
    "schemas",
    "extensions",
}

# Operators outside the namespace that must reach a status port, and only it.
OPERATOR_NAMESPACES = {"keda": ("nats", {8222}), "cnpg-system": ("quire-db", {8000})}
HEALTH_PORTS = {service: port + HEALTH_PORT_OFFSET for service, port in DEFAULT_PORTS.items()}
METRICS_PORTS = {
    service: port + METRICS_PORT_OFFSET
    for service, port in {**DEFAULT_PORTS, GATEWAY: GATEWAY_PORT}.items()
}
ENTRY_PORTS = {"admission": DEFAULT_PORTS["admission"], GATEWAY: GATEWAY_PORT}
"""The only ports reachable from outside the namespace: admission's gRPC API
and the HTTP gateway in front of it."""
OTLP_NAMESPACE, OTLP_PORT = "monitoring", 4317
"""Where quire-config sends traces (otel-collector.monitoring.svc:4317)."""
SCRAPER_NAMESPACE = "monitoring"
"""Prometheus's namespace: it reaches each service's metrics port, and only it."""
SANDBOXED = ("validator", "assembler", "signer")


# -- rendering ---------------------------------------------------------------


def _kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            "kubectl is not installed: these tests render k8s/ with `kubectl kustomize` "
            "(kubectl 1.14 or later has kustomize built in); install it and run again"
        )
    return found


def _render(tree: Path) -> list[Doc]:
    done = subprocess.run(
        [_kubectl(), "kustomize", str(tree)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"kubectl kustomize {tree} failed:\n{done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[Path, list[Doc]]:
    return {tree: _render(tree) for tree in TREES}


@pytest.fixture(scope="module")
def docs(rendered: dict[Path, list[Doc]]) -> list[Doc]:
    return [doc for tree in TREES for doc in rendered[tree]]


def _group(doc: Doc) -> str:
    api = doc["apiVersion"]
    return api.split("/")[0] if "/" in api else ""


def _of(docs: list[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def _one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [doc for doc in _of(docs, kind) if doc["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def _pod_templates(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield doc, doc["spec"]["template"]


def _env(container: Doc) -> dict[str, Doc]:
    return {item["name"]: item for item in container.get("env", [])}


def _container(deployment: Doc) -> Doc:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, deployment["metadata"]["name"]
    return containers[0]


def _secret_behind(deployment: Doc, path: str) -> str:
    """The Secret whose item a file path in the pod is, mounted read-only."""
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in _container(deployment)["volumeMounts"]}
    mount = mounts[str(Path(path).parent)]
    assert mount.get("readOnly") is True, path
    volume = volumes[mount["name"]]
    assert "secret" in volume, path
    assert Path(path).name in [i["path"] for i in volume["secret"]["items"]], path
    return volume["secret"]["secretName"]


def _selects(selector: Doc, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels and matchExpressions) matches ``labels``."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


# -- schemas -----------------------------------------------------------------


def test_every_builtin_object_validates_against_the_kubernetes_schemas(docs: list[Doc]) -> None:
    assert len(docs) > 40, "both trees rendered"
    problems = []
    for doc in docs:
        if _group(doc) in CRD_GROUPS:
            continue
        name = f"{doc['kind']} {doc['metadata'].get('name')}"
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{name}: no schema for {doc['apiVersion']} (a typo, or a CRD)")
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(p) for p in error.path)
            problems.append(f"{name}: {path}: {error.message}")
    assert not problems, "\n".join(problems)


def test_the_schema_check_is_not_vacuous(docs: list[Doc]) -> None:
    """A misspelt field and a wrong type are caught, so a pass means something."""
    deployment = copy.deepcopy(_of(docs, "Deployment")[0])
    _container(deployment)["readOnlyRootFilesytem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    deployment = copy.deepcopy(_of(docs, "Deployment")[0])
    _container(deployment)["startupProbe"]["grpc"]["port"] = "health"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_only_known_custom_resources_are_used(docs: list[Doc]) -> None:
    custom = {(doc["apiVersion"], doc["kind"]) for doc in docs if _group(doc) in CRD_GROUPS}
    assert custom == {
        ("keda.sh/v1alpha1", "ScaledObject"),
        ("postgresql.cnpg.io/v1", "Cluster"),
        ("postgresql.cnpg.io/v1", "Database"),
    }


def _unknown(keys: Any, documented: set[str], where: str) -> list[str]:
    return [f"{where}: {key} is not a documented field" for key in set(keys) - documented]


# -- KEDA ----------------------------------------------------------------------


def test_scaled_objects_use_only_documented_fields_and_the_right_consumers(
    docs: list[Doc],
) -> None:
    config = _one(docs, "ConfigMap", "quire-config")["data"]
    nats = _one(docs, "StatefulSet", "nats")
    headless = _one(docs, "Service", nats["spec"]["serviceName"])
    endpoint = f"{headless['metadata']['name']}.{NAMESPACE}.svc.cluster.local:8222"
    deployments = {d["metadata"]["name"]: d for d in _of(docs, "Deployment")}
    problems: list[str] = []
    scaled = {}
    for obj in _of(docs, "ScaledObject"):
        name = obj["metadata"]["name"]
        spec = obj["spec"]
        problems += _unknown(spec, SCALED_OBJECT_SPEC_KEYS, f"ScaledObject {name} spec")
        problems += _unknown(spec["scaleTargetRef"], SCALE_TARGET_KEYS, f"{name} scaleTargetRef")
        advanced = spec.get("advanced", {})
        problems += _unknown(advanced, ADVANCED_KEYS, f"{name} advanced")
        hpa = advanced.get("horizontalPodAutoscalerConfig", {})
        problems += _unknown(hpa, HPA_CONFIG_KEYS, f"{name} horizontalPodAutoscalerConfig")
        for key in ("pollingInterval", "cooldownPeriod", "minReplicaCount", "maxReplicaCount"):
            assert isinstance(spec.get(key, 0), int), f"{name}: {key} is an integer"
        assert spec["scaleTargetRef"]["name"] in deployments, f"{name} scales a Deployment here"
        consumers = set()
        for trigger in spec["triggers"]:
            problems += _unknown(trigger, TRIGGER_KEYS, f"{name} trigger")
            assert trigger["type"] == "nats-jetstream", name
            metadata = trigger["metadata"]
            problems += _unknown(metadata, NATS_JETSTREAM_METADATA, f"{name} trigger metadata")
            assert NATS_JETSTREAM_REQUIRED <= set(metadata), f"{name}: required metadata missing"
            assert all(isinstance(v, str) for v in metadata.values()), f"{name}: strings only"
            # Clustered JetStream: KEDA asks <server-name>.<endpoint>, so the
            # endpoint is the headless Service and server names are pod names.
            assert metadata["natsServerMonitoringEndpoint"] == endpoint, name
            assert metadata["account"] == "$G", "users in an authorization block: global account"
            assert metadata.get("useHttps", "false") in ("true", "false")
            assert int(metadata.get("lagThreshold", "5")) > 0
            consumers.add((metadata["stream"], metadata["consumer"]))
        scaled[spec["scaleTargetRef"]["name"]] = (spec, consumers)
    assert not problems, "\n".join(problems)

    for stage in STAGES:
        assert stage.service in scaled, f"{stage.service} scales on its consumers' lag"
        spec, consumers = scaled[stage.service]
        expected = {(WORK_STREAM, consumer_name(stage.name, p)) for p in PRIORITIES}
        if stage.service == "audit":
            expected.add((EVENTS_STREAM, EVENTS_CONSUMER))
        assert consumers == expected, stage.service
        # Replicas beyond the stage's limit would only wait on max_ack_pending.
        limit = int(config[f"QUIRE_{stage.service.upper()}_STAGE_LIMIT"])
        per_pod = int(
            _env(_container(deployments[stage.service]))[
                f"QUIRE_{stage.service.upper()}_CONCURRENCY"
            ]["value"]
        )
        shares = priority_shares(limit)
        assert spec["maxReplicaCount"] * per_pod <= shares["interactive"], stage.service
        assert spec["maxReplicaCount"] * max(1, per_pod // 2) <= shares["batch"], stage.service
        assert spec["minReplicaCount"] >= 2, f"{stage.service}: a drain leaves a worker"
    assert set(scaled) == {stage.service for stage in STAGES}, "admission scales on CPU"


# -- NATS ----------------------------------------------------------------------


def test_nats_is_a_three_node_jetstream_cluster_with_sync_always(docs: list[Doc]) -> None:
    nats = _one(docs, "StatefulSet", "nats")
    assert nats["spec"]["replicas"] == 3
    headless = _one(docs, "Service", nats["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None", "the governing Service is headless"
    assert headless["spec"].get("publishNotReadyAddresses") is True, "routes form before ready"
    assert {p["port"] for p in headless["spec"]["ports"]} >= {4222, 6222, 8222}
    client = _one(docs, "Service", "nats")
    assert client["spec"].get("clusterIP") != "None"
    assert {p["port"] for p in client["spec"]["ports"]} == {4222}

    config = _one(docs, "ConfigMap", "nats-config")["data"]["nats.conf"]
    jetstream = re.search(r"^jetstream\s*\{(.*?)^\}", config, re.S | re.M)
    assert jetstream, "a jetstream block"
    assert re.search(r"^\s*sync_interval:\s*always\s*$", jetstream.group(1), re.M)
    assert re.search(r"^server_name:\s*\$POD_NAME\s*$", config, re.M), "server name = pod name"
    assert re.search(r"^http_port:\s*8222\s*$", config, re.M), "monitoring for KEDA"
    container = nats["spec"]["template"]["spec"]["containers"][0]
    assert _env(container)["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    routes = set(re.findall(r"nats://([\w.-]+):6222", config))
    service = nats["spec"]["serviceName"]
    assert routes == {f"nats-{i}.{service}.{NAMESPACE}.svc.cluster.local" for i in range(3)}, (
        "a route to every pod, by its stable name"
    )
    # The authorization block (bcrypt hashes) comes from a Secret, beside nats.conf.
    include = re.search(r"^include\s+\./(\S+)\s*$", config, re.M)
    assert include, "the authorization block is included"
    sources = [
        source
        for volume in nats["spec"]["template"]["spec"]["volumes"]
        for source in volume.get("projected", {}).get("sources", [])
    ]
    assert any(
        s.get("secret", {}).get("name") == "quire-nats-auth"
        and [i["path"] for i in s["secret"]["items"]] == [include.group(1)]
        for s in sources
    )
    assert "no_auth_user" not in config and "authorization {" not in config


def test_streams_are_provisioned_with_three_replicas(rendered: dict[Path, list[Doc]]) -> None:
    main, provision = rendered[K8S], rendered[K8S / "provision"]
    assert _one(main, "ConfigMap", "quire-config")["data"]["QUIRE_NATS_REPLICAS"] == "3"
    assert not _of(main, "Job"), "the Job is applied on its own (k8s/provision)"
    job = _one(provision, "Job", "quire-nats-provision")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container.get("command", []) + container.get("args", []) == [
        "quire",
        "nats",
        "provision",
    ]
    env = _env(container)
    assert env["QUIRE_NATS_REPLICAS"]["value"] == "3"
    assert {"configMapRef": {"name": "quire-config"}} in container["envFrom"], "stage limits"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    password = Path(env["QUIRE_NATS_PASSWORD_FILE"]["value"])
    volume = next(
        v
        for v in job["spec"]["template"]["spec"]["volumes"]
        if v["name"] == mounts[str(password.parent)]
    )
    assert volume["secret"]["secretName"] == "quire-nats-operator"
    assert job["metadata"]["namespace"] == NAMESPACE


# -- the services --------------------------------------------------------------


def test_every_service_has_probes_on_its_health_port_and_its_own_command(
    docs: list[Doc],
) -> None:
    for service in SERVICES:
        deployment = _one(docs, "Deployment", service)
        container = _container(deployment)
        assert container.get("command", []) + container.get("args", []) == [f"quire-{service}"]
        health = HEALTH_PORTS[service]
        env = _env(container)
        assert env[f"QUIRE_{service.upper()}_HEALTH_ADDR"]["value"] == f"0.0.0.0:{health}"
        assert env[f"QUIRE_{service.upper()}_ADDR"]["value"] == f"0.0.0.0:{DEFAULT_PORTS[service]}"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        metrics = METRICS_PORTS[service]
        assert ports == {"grpc": DEFAULT_PORTS[service], "health": health, "metrics": metrics}
        assert env[f"QUIRE_{service.upper()}_METRICS_ADDR"]["value"] == f"0.0.0.0:{metrics}"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            # The kubelet's native gRPC probe, on the plaintext health port:
            # it works whether or not the service port demands mutual TLS.
            assert container[probe] and set(container[probe]) >= {"grpc"}, (service, probe)
            assert container[probe]["grpc"]["port"] == health, (service, probe)
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]), service
        assert "memory" in resources["limits"], service


def test_every_pod_runs_non_root_on_a_read_only_root_filesystem(docs: list[Doc]) -> None:
    templates = list(_pod_templates(docs))
    assert {owner["metadata"]["name"] for owner, _ in templates} >= {
        *SERVICES,
        GATEWAY,
        "nats",
        "quire-nats-provision",
    }
    for owner, template in templates:
        name = owner["metadata"]["name"]
        pod = template["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"].get("runAsUser", 0) != 0, name
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        assert pod.get("automountServiceAccountToken") is False, name
        assert pod.get("hostNetwork") is not True and pod.get("hostPID") is not True, name
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod.get("initContainers", []) + pod["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            assert not security["capabilities"].get("add"), name
            assert security.get("privileged") is not True, name
            assert security.get("seccompProfile", {"type": "RuntimeDefault"}) == {
                "type": "RuntimeDefault"
            }
            # Every writable mount is a volume, and for Quire's pods a
            # per-pod emptyDir: nothing is shared between replicas.
            for mount in container.get("volumeMounts", []):
                if mount.get("readOnly"):
                    continue
                volume = volumes.get(mount["name"])
                if volume is None:  # a StatefulSet's volumeClaimTemplate
                    assert owner["kind"] == "StatefulSet", (name, mount)
                    continue
                assert "emptyDir" in volume, (name, mount["name"])
                assert volume["emptyDir"].get("sizeLimit"), (name, mount["name"])
        if owner["kind"] != "StatefulSet":
            writable = {
                m["mountPath"]
                for c in pod["containers"]
                for m in c.get("volumeMounts", [])
                if not m.get("readOnly")
            }
            assert {"/tmp", "/home/quire"} <= writable, name
            if name in SERVICES:
                assert "/data" in writable, name
            if name == GATEWAY:  # it writes nothing of its own
                assert writable == {"/tmp", "/home/quire"}, name


def test_every_service_has_its_own_service_account_and_disruption_budget(
    docs: list[Doc],
) -> None:
    accounts = {doc["metadata"]["name"]: doc for doc in _of(docs, "ServiceAccount")}
    budgets = _of(docs, "PodDisruptionBudget")
    for owner, template in _pod_templates(docs):
        name = owner["metadata"]["name"]
        account = template["spec"].get("serviceAccountName", "default")
        assert account in accounts, f"{name} runs as its own ServiceAccount, not `default`"
        assert accounts[account].get("automountServiceAccountToken") is False, account
        if owner["kind"] == "Job":
            continue
        labels = template["metadata"]["labels"]
        covering = [b for b in budgets if _selects(b["spec"]["selector"], labels)]
        assert len(covering) == 1, f"{name}: one PodDisruptionBudget"
        assert "maxUnavailable" in covering[0]["spec"] or "minAvailable" in covering[0]["spec"]
    service_accounts = [
        _one(docs, "Deployment", s)["spec"]["template"]["spec"]["serviceAccountName"]
        for s in (*SERVICES, GATEWAY)
    ]
    assert service_accounts == [*SERVICES, GATEWAY], "one ServiceAccount per service and gateway"
    gateway_budget = _one(docs, "PodDisruptionBudget", GATEWAY)["spec"]
    assert gateway_budget == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": GATEWAY}},
    }


def test_no_shared_volume_blobs_live_in_nats(docs: list[Doc]) -> None:
    config = _one(docs, "ConfigMap", "quire-config")["data"]
    assert config["QUIRE_BLOB_BACKEND"] == "nats"
    assert "QUIRE_BLOB_ROOT" not in config
    assert not _of(docs, "PersistentVolumeClaim"), "no ReadWriteMany claim"
    for owner, template in _pod_templates(docs):
        for volume in template["spec"].get("volumes", []):
            assert "persistentVolumeClaim" not in volume, owner["metadata"]["name"]
            assert "hostPath" not in volume, owner["metadata"]["name"]


def test_shared_secrets_come_from_mounted_files(docs: list[Doc]) -> None:
    """Every replica agrees on the operator token, audit's checkpoint key, the
    signing key, the witness's key, the KEK ring; each service has its own
    NATS login, identity key and database URL."""
    expected_files = {
        "admission": {"QUIRE_OPERATOR_TOKEN_FILE": "quire-operator-token"},
        "audit": {"QUIRE_AUDIT_CHECKPOINT_KEY_FILE": "quire-audit-checkpoint-key"},
        "signer": {
            "QUIRE_SIGNER_KEY_FILE": "quire-signer-key",
            "QUIRE_SIGNER_CERT_FILE": "quire-signer-key",
            "QUIRE_WITNESS_KEY_FILE": "quire-witness-key",
        },
    }
    for service in SERVICES:
        deployment = _one(docs, "Deployment", service)
        container = _container(deployment)
        env = _env(container)

        files = {
            "QUIRE_NATS_PASSWORD_FILE": f"quire-nats-{service}",
            f"QUIRE_{service.upper()}_IDENTITY_KEY_FILE": f"quire-identity-{service}",
            "QUIRE_KEK_FILE": "quire-kek-ring",
            **expected_files.get(service, {}),
        }
        for variable, secret in files.items():
            path = env[variable]["value"]
            assert _secret_behind(deployment, path) == secret, (service, variable)
        assert env["QUIRE_NATS_USER"]["value"] == service
        url = env[f"QUIRE_{service.upper()}_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert url == {"name": f"quire-database-{service}", "key": "url"}, service
        assert "QUIRE_OPERATOR_TOKEN" not in env and "QUIRE_TOKEN" not in env
        for variable in env:
            assert not variable.endswith("_FILE") or variable in files, (service, variable)


def test_every_setting_named_is_one_quire_reads(docs: list[Doc]) -> None:
    named = set(_one(docs, "ConfigMap", "quire-config")["data"])
    for _owner, template in _pod_templates(docs):
        for container in template["spec"]["containers"]:
            named |= {name for name in _env(container) if name.startswith("QUIRE_")}
    quire = {name for name in named if not name.startswith("OTEL_")}
    assert quire - known() == set(), "misspelt or unknown QUIRE_* settings"
    standard = {getattr(otel_variables, n) for n in dir(otel_variables) if n.startswith("OTEL_")}
    assert named - quire <= standard, "OpenTelemetry's own variables, spelt as its SDK reads them"


def test_every_quire_pod_runs_the_build_version_its_image_is_tagged_with(
    docs: list[Doc],
) -> None:
    """``QUIRE_BUILD_VERSION`` (the version on every ledger entry and
    announcement) comes from the image tag ``images:`` sets, in one place."""
    version = str(_one(docs, "ConfigMap", "quire-config")["data"]["QUIRE_BUILD_VERSION"])
    for deployment in _of(docs, "Deployment"):
        container = _container(deployment)
        if not container["image"].split("/")[-1].startswith("quire:"):
            continue
        name = deployment["metadata"]["name"]
        assert container["image"].rsplit(":", 1)[1] == version, name
        assert {"configMapRef": {"name": "quire-config"}} in container["envFrom"], name
        assert "QUIRE_BUILD_VERSION" not in _env(container), f"{name}: not overridden"


# -- PostgreSQL ----------------------------------------------------------------


def test_postgres_is_a_cloudnativepg_cluster_with_one_database_per_service(
    docs: list[Doc],
) -> None:
    clusters = _of(docs, "Cluster")
    assert len(clusters) == 1
    cluster = clusters[0]
    name = cluster["metadata"]["name"]
    spec = cluster["spec"]
    problems = _unknown(spec, CNPG_CLUSTER_SPEC_KEYS, "Cluster spec")
    problems += _unknown(spec.get("postgresql", {}), CNPG_POSTGRESQL_KEYS, "spec.postgresql")
    problems += _unknown(
        spec.get("postgresql", {}).get("synchronous", {}), CNPG_SYNCHRONOUS_KEYS, "synchronous"
    )
    problems += _unknown(spec.get("affinity", {}), CNPG_AFFINITY_KEYS, "spec.affinity")
    initdb = spec.get("bootstrap", {}).get("initdb", {})
    problems += _unknown(initdb, CNPG_INITDB_KEYS, "bootstrap.initdb")
    roles = spec.get("managed", {}).get("roles", [])
    for role in roles:
        problems += _unknown(role, CNPG_ROLE_KEYS, f"managed role {role.get('name')}")
    databases = _of(docs, "Database")
    for database in databases:
        problems += _unknown(database["spec"], CNPG_DATABASE_SPEC_KEYS, "Database spec")
    assert not problems, "\n".join(problems)

    assert spec["instances"] >= 3
    assert isinstance(spec["storage"]["size"], str)
    assert all(isinstance(v, str) for v in spec["postgresql"].get("parameters", {}).values())
    assert {r["name"] for r in roles} == set(SERVICES), "a login role per service"
    for role in roles:
        assert role["passwordSecret"]["name"] == f"quire-db-{role['name']}"
        assert role["ensure"] == "present" and role["login"] is True
    owned = {
        d["spec"]["name"]: d["spec"]["owner"]
        for d in databases
        if d["spec"]["cluster"]["name"] == name and d["spec"].get("ensure") == "present"
    }
    assert owned == {service: service for service in SERVICES}, "its own database, its own role"
    assert initdb.get("database") in (None, *SERVICES)
    assert initdb.get("owner", initdb.get("database")) == initdb.get("database")


# -- who can reach what -----------------------------------------------------------


def test_only_admissions_grpc_port_and_the_gateways_http_port_are_reachable_from_outside(
    docs: list[Doc],
) -> None:
    for service in _of(docs, "Service"):
        name = service["metadata"]["name"]
        if service["spec"].get("type", "ClusterIP") != "ClusterIP":
            assert name in ENTRY_PORTS, f"{name} must not be exposed outside the cluster"

    policies = _of(docs, "NetworkPolicy")
    default = [
        p
        for p in policies
        if p["spec"]["podSelector"] == {}
        and "Ingress" in p["spec"]["policyTypes"]
        and not p["spec"].get("ingress")
    ]
    assert default, "a default-deny ingress policy for every pod in the namespace"

    entry_labels = {name: {"app.kubernetes.io/name": name} for name in ENTRY_PORTS}
    open_to_all: dict[str, set[int]] = {}
    for policy in policies:
        name = policy["metadata"]["name"]
        for rule in policy["spec"].get("ingress", []):
            ports = {p["port"] for p in rule.get("ports", [])}
            assert ports, f"{name}: every rule names its ports"
            peers = rule.get("from", [])
            if not peers:
                selector = policy["spec"]["podSelector"]
                entry = [
                    e for e, labels in entry_labels.items() if selector == {"matchLabels": labels}
                ]
                assert entry, f"{name}: open to all, but not on admission or the gateway"
                open_to_all.setdefault(entry[0], set()).update(ports)
                continue
            for peer in peers:
                assert "ipBlock" not in peer, f"{name}: no address ranges"
                if "namespaceSelector" in peer:
                    namespace = peer["namespaceSelector"].get("matchLabels", {})
                    which = namespace.get("kubernetes.io/metadata.name")
                    if which == SCRAPER_NAMESPACE:
                        selected = policy["spec"]["podSelector"]["matchLabels"]
                        service = selected["app.kubernetes.io/name"]
                        assert ports == {METRICS_PORTS[service]}, f"{name}: metrics port only"
                        continue
                    assert which in OPERATOR_NAMESPACES, f"{name}: {namespace} is not allowed"
                    target, allowed = OPERATOR_NAMESPACES[which]
                    assert policy["spec"]["podSelector"]["matchLabels"] in (
                        {"app.kubernetes.io/name": target},
                        {"cnpg.io/cluster": target},
                    ), name
                    assert ports <= allowed, f"{name}: {which} reaches only {allowed}"
                    assert "podSelector" not in peer or peer["podSelector"] is not None
                else:
                    assert "podSelector" in peer, name
    assert open_to_all == {name: {port} for name, port in ENTRY_PORTS.items()}, open_to_all
    # Each entry port is the pod's own serving port, as its Service forwards it.
    for name, port in ENTRY_PORTS.items():
        container = _container(_one(docs, "Deployment", name))
        service = _one(docs, "Service", name)
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert [named.get(p["targetPort"], p["targetPort"]) for p in service["spec"]["ports"]] == [
            port
        ], name


def test_nats_and_postgres_admit_only_quire_pods(docs: list[Doc]) -> None:
    quire_pods = {
        owner["metadata"]["name"]: template["metadata"]["labels"]
        for owner, template in _pod_templates(docs)
    }
    policies = _of(docs, "NetworkPolicy")
    nats_labels = quire_pods["nats"]
    postgres_labels = {"cnpg.io/cluster": _of(docs, "Cluster")[0]["metadata"]["name"]}

    def admitted(target: dict[str, str], port: int) -> list[Doc]:
        peers = []
        for policy in policies:
            if not _selects(policy["spec"]["podSelector"], target):
                continue
            for rule in policy["spec"].get("ingress", []):
                if port in {p["port"] for p in rule.get("ports", [])}:
                    peers.extend(rule.get("from", [{}]))
        return peers

    for target, port, clients in (
        (nats_labels, 4222, {*SERVICES, "quire-nats-provision"}),
        (postgres_labels, 5432, set(SERVICES)),
    ):
        peers = admitted(target, port)
        assert peers, port
        for peer in peers:
            assert set(peer) == {"podSelector"}, f"port {port}: pods of this namespace only"
        may = {
            name
            for name, labels in quire_pods.items()
            if any(_selects(peer["podSelector"], labels) for peer in peers)
        }
        assert clients <= may, (port, clients - may)
        assert may <= clients | {"nats"}, (port, may - clients)
    assert admitted(nats_labels, 8222), "KEDA reads the monitoring port"


# -- the HTTP gateway ------------------------------------------------------------


def _effective_env(docs: list[Doc], container: Doc) -> dict[str, str]:
    """The variables a container starts with: quire-config, then its own ``env``."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(_one(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    env.update({name: item["value"] for name, item in _env(container).items() if "value" in item})
    return env


def test_the_gateway_serves_http_with_probes_on_healthz_and_its_own_command(
    docs: list[Doc],
) -> None:
    deployment = _one(docs, "Deployment", GATEWAY)
    pod = deployment["spec"]["template"]
    container = _container(deployment)
    assert container.get("command", []) + container.get("args", []) == [f"quire-{GATEWAY}"]
    assert {"configMapRef": {"name": "quire-config"}} in container["envFrom"], "as the others"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": GATEWAY_PORT, "metrics": METRICS_PORTS[GATEWAY]}

    # Its settings as quire.gateway.config reads them from what the pod is given.
    env = _effective_env(docs, container)
    settings = GatewaySettings.from_env(env)
    assert settings.address == f"0.0.0.0:{GATEWAY_PORT}"
    assert settings.metrics_address == f"0.0.0.0:{METRICS_PORTS[GATEWAY]}"
    admission = _one(docs, "Service", "admission")
    [grpc_port] = [p["port"] for p in admission["spec"]["ports"] if p["name"] == "grpc"]
    assert settings.admission_address == f"admission.{NAMESPACE}.svc:{grpc_port}"
    tls = {name for name in env if name.startswith("QUIRE_TLS_")}
    admission_env = _effective_env(docs, _container(_one(docs, "Deployment", "admission")))
    assert tls == {name for name in admission_env if name.startswith("QUIRE_TLS_")}, "as admission"
    assert _env(container)["QUIRE_INSTANCE"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.name"
    )
    # Drain inside the grace period: the preStop pause, then uvicorn's drain.
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pause + settings.drain_seconds < pod["spec"]["terminationGracePeriodSeconds"]

    # /healthz, the route the OpenAPI document serves without a token.
    openapi = json.loads((ROOT / "services" / "gateway" / "openapi.json").read_text())
    assert openapi["paths"]["/healthz"]["get"]["security"] == []
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        check = container[probe]["httpGet"]
        assert check["path"] == "/healthz", probe
        assert ports.get(check["port"], check["port"]) == GATEWAY_PORT, probe
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"])
    assert "memory" in resources["limits"]

    # A translator: no database, no NATS login, no identity key; its one
    # secret seals the console's sessions.
    secrets = [v for v in pod["spec"].get("volumes", []) if "secret" in v or "projected" in v]
    assert [v["secret"]["secretName"] for v in secrets] == ["quire-console-key"]
    assert _env(container)["QUIRE_CONSOLE_KEY_FILE"]["value"] == "/etc/quire/console/key"
    assert not [i for i in container.get("env", []) if "secretKeyRef" in i.get("valueFrom", {})]
    assert [name for name in _env(container) if name.endswith("_FILE")] == [
        "QUIRE_CONSOLE_KEY_FILE"
    ]
    # Not one of the services: NATS and PostgreSQL admit only those.
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] != "service"

    service = _one(docs, "Service", GATEWAY)
    assert _selects({"matchLabels": service["spec"]["selector"]}, pod["metadata"]["labels"])
    assert [(p["port"], ports[p["targetPort"]]) for p in service["spec"]["ports"]] == [
        (GATEWAY_PORT, GATEWAY_PORT)
    ]


def test_admission_and_the_gateway_scale_on_cpu_and_the_stages_on_lag(docs: list[Doc]) -> None:
    scaled_on_lag = {o["spec"]["scaleTargetRef"]["name"] for o in _of(docs, "ScaledObject")}
    autoscalers = {}
    for hpa in _of(docs, "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment", hpa["metadata"]["name"]
        autoscalers[target["name"]] = hpa["spec"]
    assert set(autoscalers) == {"admission", GATEWAY}
    assert not set(autoscalers) & scaled_on_lag, "one autoscaler per Deployment"
    for name, spec in autoscalers.items():
        assert spec["minReplicas"] >= 2, f"{name}: a drain leaves a replica"
        assert [m["resource"]["name"] for m in spec["metrics"]] == ["cpu"], name
    for deployment in _of(docs, "Deployment"):
        name = deployment["metadata"]["name"]
        assert name in autoscalers or name in scaled_on_lag, f"{name} is autoscaled"
        assert "replicas" not in deployment["spec"], f"{name}: apply must not fight its autoscaler"


def test_the_gateway_dials_only_dns_the_services_and_the_otlp_collector(docs: list[Doc]) -> None:
    """The API calls admission; the console calls every service with the
    signed-in person's token. Nothing else: not NATS, not PostgreSQL."""
    labels = _one(docs, "Deployment", GATEWAY)["spec"]["template"]["metadata"]["labels"]
    egress = [p for p in _of(docs, "NetworkPolicy") if "Egress" in p["spec"]["policyTypes"]]
    assert egress, "the gateway's egress is restricted"
    for policy in egress:
        selected = policy["spec"]["podSelector"]
        assert selected == {"matchLabels": {"app.kubernetes.io/name": GATEWAY}}, (
            "egress is left open for the services"
        )
        assert _selects(selected, labels)
    allowed = set()
    for policy in egress:
        for rule in policy["spec"].get("egress", []):
            assert rule.get("to"), f"{policy['metadata']['name']}: every rule names its peers"
            ports = frozenset((p["port"], p.get("protocol", "TCP")) for p in rule["ports"])
            for peer in rule["to"]:
                assert "ipBlock" not in peer, "no address ranges"
                namespace = peer.get("namespaceSelector", {}).get("matchLabels", {})
                pods = peer.get("podSelector", {}).get("matchLabels", {})
                which = namespace.get(
                    "kubernetes.io/metadata.name", NAMESPACE if not namespace else ""
                )
                allowed.add((which, tuple(sorted(pods.items())), ports))
    config = _one(docs, "ConfigMap", "quire-config")["data"]
    collector = re.fullmatch(
        r"http://[\w-]+\.([\w-]+)\.svc:(\d+)", config["OTEL_EXPORTER_OTLP_ENDPOINT"]
    )
    assert collector and (collector.group(1), int(collector.group(2))) == (
        OTLP_NAMESPACE,
        OTLP_PORT,
    )
    ports = {
        service: int(config[f"QUIRE_{service.upper()}_ADDR"].rpartition(":")[2])
        for service in SERVICES
    }
    assert allowed == {
        ("kube-system", (("k8s-app", "kube-dns"),), frozenset({(53, "UDP"), (53, "TCP")})),
        *(
            (NAMESPACE, (("app.kubernetes.io/name", service),), frozenset({(port, "TCP")}))
            for service, port in ports.items()
        ),
        (OTLP_NAMESPACE, (), frozenset({(OTLP_PORT, "TCP")})),
    }, allowed
    # ... and each service lets it in on that port.
    for service, port in ports.items():
        pod = _one(docs, "Deployment", service)["spec"]["template"]["metadata"]["labels"]
        admits = [
            rule
            for policy in _of(docs, "NetworkPolicy")
            if _selects(policy["spec"]["podSelector"], pod)
            for rule in policy["spec"].get("ingress", [])
            if port in {p["port"] for p in rule.get("ports", [])}
            and (
                not rule.get("from")
                or any(
                    "namespaceSelector" not in peer
                    and _selects(peer.get("podSelector", {}), labels)
                    for peer in rule["from"]
                )
            )
        ]
        assert admits, f"{service} admits the gateway on its gRPC port"


def test_prometheus_scrapes_every_metrics_port_and_may_reach_it(docs: list[Doc]) -> None:
    monitoring = _render(K8S / "monitoring")
    [monitor] = _of(monitoring, "PodMonitor")
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    policies = _of(docs, "NetworkPolicy")
    with_metrics = {}
    for owner, template in _pod_templates(docs):
        for container in template["spec"]["containers"]:
            named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            if "metrics" in named:
                with_metrics[owner["metadata"]["name"]] = (template["metadata"]["labels"], named)
    assert set(with_metrics) == {*SERVICES, GATEWAY}
    for owner, template in _pod_templates(docs):
        name = owner["metadata"]["name"]
        labels = template["metadata"]["labels"]
        assert _selects(monitor["spec"]["selector"], labels) == (name in with_metrics), name
    for name, (labels, named) in with_metrics.items():
        assert named["metrics"] == METRICS_PORTS[name], name
        scrapers = [
            rule
            for policy in policies
            if _selects(policy["spec"]["podSelector"], labels)
            for rule in policy["spec"].get("ingress", [])
            if any(
                peer.get("namespaceSelector", {}).get("matchLabels", {})
                == {"kubernetes.io/metadata.name": SCRAPER_NAMESPACE}
                for peer in rule.get("from", [])
            )
        ]
        assert [{p["port"] for p in rule["ports"]} for rule in scrapers] == [
            {METRICS_PORTS[name]}
        ], name


def test_every_command_a_pod_runs_is_in_the_image(docs: list[Doc]) -> None:
    """Each pod's command is a console script of a distribution the
    Containerfile builds into the image (a service left out of its wheel list
    would fail the image's install, or the pod's start)."""
    containerfile = (ROOT / "Containerfile").read_text()
    built = re.search(r"pip wheel --no-deps -w /dist \\\n(.*?)\n\s*\.\n", containerfile, re.S)
    assert built, "the Containerfile builds the project's wheels"
    folders = set(re.findall(r"\./([\w/]+)", built.group(1)))
    scripts: dict[str, str] = {}
    for pyproject in [*ROOT.glob("services/*/pyproject.toml"), *ROOT.glob("libs/*/pyproject.toml")]:
        project = tomllib.loads(pyproject.read_text())["project"]
        for script in project.get("scripts", {}):
            scripts[script] = str(pyproject.parent.relative_to(ROOT))
    for owner, template in _pod_templates(docs):
        for container in template["spec"]["containers"]:
            if container["image"].split(":")[0] != "quire":
                continue
            command = (container.get("command", []) + container.get("args", []))[0]
            assert command in scripts, (
                f"{owner['metadata']['name']}: {command} is no console script"
            )
            assert scripts[command] in folders, (
                f"{owner['metadata']['name']}: {scripts[command]} is not built into the image"
            )


# -- nothing secret ------------------------------------------------------------------


def test_no_secret_is_committed_in_the_tree(docs: list[Doc]) -> None:
    assert not _of(docs, "Secret"), "Secrets are created out of band and referenced by name"
    for path in sorted(K8S.rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text()
        relative = path.relative_to(ROOT)
        if path.name == "kustomization.yaml":
            kustomization = yaml.safe_load(text)
            assert "secretGenerator" not in kustomization, relative
        assert "-----BEGIN" not in text, f"{relative}: key material"
        assert not re.search(r"qt_[0-9a-f]{12}_[A-Za-z0-9_-]{32,}", text), f"{relative}: a token"
        assert not re.search(r"\$2[aby]\$\d\d\$", text), f"{relative}: a bcrypt hash"
        # A database URL with a literal password (a shell variable is fine).
        url = re.search(r"postgres(ql)?(\+\w+)?://[^:\s/]+:(?!\$)[^@\s]+@", text)
        assert not url, f"{relative}: a database password"


def test_every_referenced_secret_is_documented_and_images_name_no_registry(
    docs: list[Doc],
) -> None:
    readme = (ROOT / "docs" / "guides" / "kubernetes.md").read_text()
    referenced = set()
    for owner, template in _pod_templates(docs):
        pod = template["spec"]
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                referenced.add(volume["secret"]["secretName"])
            for source in volume.get("projected", {}).get("sources", []):
                if "secret" in source:
                    referenced.add(source["secret"]["name"])
        for container in pod["containers"]:
            for item in container.get("env", []):
                ref = item.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    referenced.add(ref["name"])
            image = container["image"]
            first = image.split("/")[0]
            assert "/" not in image or not ("." in first or ":" in first), (
                f"{owner['metadata']['name']}: the image names a registry; "
                "set it with `kustomize edit set image`"
            )
    for cluster in _of(docs, "Cluster"):
        for role in cluster["spec"]["managed"]["roles"]:
            referenced.add(role["passwordSecret"]["name"])
    for name in sorted(referenced):
        generic = re.sub(r"-(admission|validator|assembler|signer|audit)$", "-<service>", name)
        assert name in readme or generic in readme, f"the Kubernetes guide does not explain {name}"
