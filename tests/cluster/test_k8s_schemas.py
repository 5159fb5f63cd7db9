"""cluster/kubernetes/*.yaml validated offline against the real API schemas.

* Built-in kinds (batch/v1 CronJob, v1 PersistentVolumeClaim, and the Pod, Service and
  ObjectMeta parts embedded elsewhere) against the Kubernetes OpenAPI schemas that the
  ``kubernetes-validate`` package ships (one JSON schema set per Kubernetes minor
  version), in its *strict* mode: unknown fields are errors, as with
  ``kubectl apply --validate=strict``.  Every shipped version from K8S_MIN on is checked.
* The DaskJob (``kubernetes.dask.org/v1``) against the CustomResourceDefinition that the
  dask-kubernetes operator installs: ``crds/daskjob.yaml`` of the operator's Helm chart,
  shipped inside the ``dask-kubernetes`` package (read from its wheel, which .ci/setup
  downloads, or from an installed copy).  jsonschema checks types, enums and
  required fields; fields that the CRD's structural schema does not declare are reported
  too (the API server would silently drop them).
* helm-values.yaml is not a manifest and the dask/dask chart is not packaged anywhere
  reachable offline (nor is helm), so its templates cannot be rendered here; but the
  fragments it splices into the chart's pod templates (resources, probes, volumes and
  mounts) are real Kubernetes objects, and are validated as such inside a Pod.

The checks are also run on broken copies of the manifests, to show they reject errors.
Skipped, with the reason, when ``kubernetes-validate`` (in the ``test`` extra) or the
dask-kubernetes CRDs are missing.
"""
from __future__ import annotations

import copy
import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "cluster" / "kubernetes"
# cronjob.yaml uses spec.timeZone (GA in Kubernetes 1.27), and says so
K8S_MIN = "1.27"
PLACEHOLDER_IMAGE = "ghcr.io/example/daskpd:latest"
CRD_DIR = ("operator", "deployment", "helm", "dask-kubernetes-operator", "crds")


# --------------------------------------------------------------------------- schema sources

@pytest.fixture(scope="module")
def kv():
    return pytest.importorskip("kubernetes_validate",
                               reason="kubernetes-validate (offline Kubernetes API schemas) is not installed")


@pytest.fixture(scope="module")
def k8s_versions(kv):
    from kubernetes_validate.utils import all_versions, major_minor

    versions = sorted({major_minor(v) for v in all_versions() if Version(v) >= Version(K8S_MIN)}, key=Version)
    assert versions, f"kubernetes-validate ships no schemas for Kubernetes >= {K8S_MIN}"
    return versions


def _crd_texts() -> tuple[str, list[str]]:
    """(where, [YAML text]) of the operator's CRDs: an installed dask-kubernetes (not
    imported), else the wheel that .ci/setup downloads into .venv/share/daskpd-crds."""
    spec = importlib.util.find_spec("dask_kubernetes")
    if spec is not None and spec.origin is not None:
        crd_dir = Path(spec.origin).parent.joinpath(*CRD_DIR)
        return str(crd_dir), [f.read_text() for f in sorted(crd_dir.glob("*.yaml"))]
    wheels = sorted(Path(sys.prefix, "share", "daskpd-crds").glob("dask_kubernetes-*.whl"),
                    key=lambda p: Version(p.name.split("-")[1]))
    if not wheels:
        pytest.skip("the DaskJob CRD is not available: dask-kubernetes is neither installed nor "
                    "downloaded (`bash .ci/setup` puts its wheel in .venv/share/daskpd-crds)")
    prefix = "dask_kubernetes/" + "/".join(CRD_DIR) + "/"
    with zipfile.ZipFile(wheels[-1]) as z:
        names = sorted(n for n in z.namelist() if n.startswith(prefix) and n.endswith(".yaml"))
        return str(wheels[-1]), [z.read(n).decode() for n in names]


@pytest.fixture(scope="module")
def crds() -> dict:
    """{(group, kind): CRD document} from the dask-kubernetes operator's Helm chart."""
    where, texts = _crd_texts()
    assert texts, f"no CRDs in {where}: has dask-kubernetes moved them?"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml: the CRDs are ~1 MB of YAML
    out = {}
    for text in texts:
        for doc in yaml.load_all(text, Loader=loader):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                out[(doc["spec"]["group"], doc["spec"]["names"]["kind"])] = doc
    return out


# --------------------------------------------------------------------------- validators

def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def one(name: str, kind: str) -> dict:
    (d,) = [d for d in docs(name) if d.get("kind") == kind]
    return d


def core_errors(kv, doc: dict, versions) -> list[str]:
    """Strict validation of a built-in kind against every version: error messages."""
    errors = []
    for v in versions:
        try:
            kv.validate(doc, v, strict=True)
        except kv.ValidationError as e:
            path = ".".join(map(str, e.absolute_path)) or "(top)"
            errors.append(f"Kubernetes {v}: {doc['kind']} {path}: {e.message}")
    return errors


def as_pod(pod_spec: dict, name: str = "check") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec}


def as_service(service_spec: dict, name: str = "check") -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": service_spec}


def metadata_only(meta: dict) -> dict:
    """ObjectMeta is the same for every kind: check it as a ConfigMap's."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def undeclared_fields(value, schema: dict, path: str = "") -> list[str]:
    """Paths in value that the structural schema does not declare (the API server prunes them)."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out = []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            where = f"{path}.{key}" if path else key
            if props is not None and key in props:
                out += undeclared_fields(sub, props[key], where)
            elif isinstance(extra, dict):
                out += undeclared_fields(sub, extra, where)
            elif props is not None or extra is False:
                out.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += undeclared_fields(item, schema["items"], f"{path}[{i}]")
    return out


def crd_errors(crds: dict, doc: dict) -> list[str]:
    """A custom resource against its CRD's openAPIV3Schema: jsonschema errors + undeclared fields."""
    import jsonschema

    group, _, version = doc["apiVersion"].rpartition("/")
    crd = crds.get((group, doc["kind"]))
    assert crd is not None, f"no CRD for {doc['kind']} in group {group}: {sorted(crds)}"
    served = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served", True)}
    assert version in served, f"{doc['kind']}: CRD serves {sorted(served)}, not {version}"
    schema = served[version]["schema"]["openAPIV3Schema"]
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
    errors = [f"{doc['kind']} {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
              for e in jsonschema.Draft7Validator(schema).iter_errors(body)]
    errors += [f"{doc['kind']} {p}: not declared in the CRD" for p in undeclared_fields(body, schema)]
    return errors


def daskjob_core_parts(job: dict) -> list[dict]:
    """The built-in objects inside a DaskJob: its metadata, the pods and the scheduler Service."""
    cluster = job["spec"]["cluster"]["spec"]
    parts = [metadata_only(job["metadata"]), as_pod(job["spec"]["job"]["spec"], "runner"),
             as_pod(cluster["worker"]["spec"], "worker"), as_pod(cluster["scheduler"]["spec"], "scheduler"),
             as_service(cluster["scheduler"]["service"], "scheduler")]
    if "metadata" in job["spec"]["job"]:
        parts.append(metadata_only(job["spec"]["job"]["metadata"]))
    return parts


def helm_fragments_pod(values: dict) -> dict:
    """The Kubernetes objects helm-values.yaml hands to the dask chart's templates, in a Pod."""
    s, w = values["scheduler"], values["worker"]
    scheduler = {"name": "scheduler", "image": PLACEHOLDER_IMAGE, "resources": s.get("resources", {})}
    for probe in ("readinessProbe", "livenessProbe"):
        if probe in s:
            scheduler[probe] = s[probe]
    worker = {"name": "worker", "image": PLACEHOLDER_IMAGE, "resources": w.get("resources", {}),
              "volumeMounts": w.get("mounts", {}).get("volumeMounts", [])}
    for probe in ("readinessProbe", "livenessProbe"):
        if probe in w:
            worker[probe] = w[probe]
    spec = {"containers": [scheduler, worker], "volumes": w.get("mounts", {}).get("volumes", [])}
    for key in ("tolerations", "affinity", "nodeSelector", "securityContext"):
        for section in (s, w):
            if section.get(key):
                spec[key] = section[key]   # pod-level in the chart's templates
    return as_pod(spec, "helm-values")


# --------------------------------------------------------------------------- the manifests

def test_cronjob_and_storage_validate_strictly(kv, k8s_versions):
    checked = docs("cronjob.yaml") + docs("storage.yaml")
    assert {d["kind"] for d in checked} == {"CronJob", "PersistentVolumeClaim"}
    errors = [e for d in checked for e in core_errors(kv, d, k8s_versions)]
    assert not errors, "\n".join(errors)


def test_daskjob_validates_against_the_operator_crd(crds):
    job = one("daskjob.yaml", "DaskJob")
    errors = crd_errors(crds, job)
    assert not errors, "\n".join(errors)


def test_daskjob_embedded_objects_validate_strictly(kv, k8s_versions):
    job = one("daskjob.yaml", "DaskJob")
    errors = [e for part in daskjob_core_parts(job) for e in core_errors(kv, part, k8s_versions)]
    assert not errors, "\n".join(errors)


def test_helm_values_fragments_validate_strictly(kv, k8s_versions):
    values = docs("helm-values.yaml")[0]
    errors = core_errors(kv, helm_fragments_pod(values), k8s_versions)
    assert not errors, "\n".join(errors)


def test_every_manifest_is_covered():
    """Each document in cluster/kubernetes is checked by one of the tests above."""
    covered = {("cronjob.yaml", "CronJob"), ("storage.yaml", "PersistentVolumeClaim"),
               ("daskjob.yaml", "DaskJob"), ("helm-values.yaml", None)}
    found = {(p.name, d.get("kind")) for p in sorted(K8S.glob("*.yaml")) for d in docs(p.name)}
    assert found <= covered, f"not validated against a schema: {found - covered}"


# --------------------------------------------------------------------------- the checks bite

def _cron_container(d):
    return d["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]


CORE_BREAKAGES = {
    "misspelt container field": (
        "cronjob.yaml", "CronJob", lambda d: _cron_container(d).update(volumeMount=[]), "volumeMount"),
    "field at the wrong level": (
        "cronjob.yaml", "CronJob", lambda d: d["spec"].update(backoffLimit=1), "backoffLimit"),
    "wrong type": (
        "cronjob.yaml", "CronJob", lambda d: d["spec"].update(startingDeadlineSeconds="1h"), "1h"),
    "missing required field": (
        "cronjob.yaml", "CronJob", lambda d: _cron_container(d).pop("name"), "name"),
    "bad PVC access modes": (
        "storage.yaml", "PersistentVolumeClaim", lambda d: d["spec"].update(accessModes="ReadWriteMany"),
        "ReadWriteMany"),
}


@pytest.mark.parametrize("case", sorted(CORE_BREAKAGES))
def test_core_validation_rejects(kv, k8s_versions, case):
    name, kind, breaks, expected = CORE_BREAKAGES[case]
    doc = copy.deepcopy([d for d in docs(name) if d["kind"] == kind][0])
    breaks(doc)
    errors = core_errors(kv, doc, k8s_versions[-1:])
    assert errors and expected in errors[0], errors


def test_core_validation_is_per_version(kv, k8s_versions):
    """A field newer than K8S_MIN fails there: Job.spec.managedBy exists from Kubernetes 1.30."""
    cj = copy.deepcopy(one("cronjob.yaml", "CronJob"))
    cj["spec"]["jobTemplate"]["spec"]["managedBy"] = "kubernetes.io/job-controller"
    assert core_errors(kv, cj, [K8S_MIN]), "1.27 should not know Job.spec.managedBy"
    assert not core_errors(kv, cj, k8s_versions[-1:])


def _worker(d):
    return d["spec"]["cluster"]["spec"]["worker"]


CRD_BREAKAGES = {
    "misspelt DaskJob field": (lambda d: _worker(d).update(replica=4), "worker.replica"),
    "wrong type": (lambda d: _worker(d).update(replicas="four"), "'four' is not of type 'integer'"),
    "missing scheduler service": (lambda d: d["spec"]["cluster"]["spec"]["scheduler"].pop("service"),
                                  "'service' is a required property"),
    "misspelt pod field inside the DaskJob": (
        lambda d: d["spec"]["job"]["spec"]["containers"][0].update(volumeMount=[]), "volumeMount"),
    "bad port type": (
        lambda d: d["spec"]["cluster"]["spec"]["scheduler"]["spec"]["containers"][0]["ports"][0].update(
            containerPort="8786"), "'8786' is not of type 'integer'"),
}


@pytest.mark.parametrize("case", sorted(CRD_BREAKAGES))
def test_crd_validation_rejects(crds, case):
    breaks, expected = CRD_BREAKAGES[case]
    doc = copy.deepcopy(one("daskjob.yaml", "DaskJob"))
    breaks(doc)
    errors = crd_errors(crds, doc)
    assert any(expected in e for e in errors), errors


def test_helm_fragment_validation_rejects(kv, k8s_versions):
    values = copy.deepcopy(docs("helm-values.yaml")[0])
    values["worker"]["mounts"]["volumes"][0]["persistentVolumeClaim"]["claim"] = "daskpd-lake"
    errors = core_errors(kv, helm_fragments_pod(values), k8s_versions[-1:])
    assert errors and "claim" in errors[0], errors
