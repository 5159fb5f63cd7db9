"""Tests for the deployment configs in cluster/.

Two kinds of test:

* static: every YAML parses and uses the real keys of its tool (dask-kubernetes
  operator CRDs, the dask Helm chart, batch/v1 CronJob, dask-jobqueue,
  distributed's TLS config), cron schedules are valid, shell scripts pass
  ``bash -n``, the Dockerfile and sbatch script are well formed;
* real (marked ``cluster``): the scripts start real ``dask scheduler`` /
  ``dask worker`` processes on 127.0.0.1 (free ports), a ``distributed.Client``
  connects and computes, TLS is enforced, and the processes are gone after the
  stop script.  ``run_slurm.py`` and ``daskpd.sbatch`` run end to end against
  stand-ins for ``dask_jobqueue``/``srun``/``daskpd``, so that they are exercised
  where SLURM is absent; tests/cluster/test_slurm_real.py runs them on a real SLURM.

Nothing here imports daskpd; helpers live in this file (tests/conftest.py
belongs to the library's tests).
"""
from __future__ import annotations

import gc
import json
import os
import py_compile
import re
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
LOCAL = CLUSTER / "local"
TLS = CLUSTER / "tls"
K8S = CLUSTER / "kubernetes"
SLURM = CLUSTER / "slurm"
START = LOCAL / "start-cluster.sh"
STOP = LOCAL / "stop-cluster.sh"
MAKE_CERTS = TLS / "make-certs.sh"
START_TLS = TLS / "start-tls-cluster.sh"
TLS_YAML = TLS / "dask-tls.yaml"
TLS_PLACEHOLDER_DIR = "/etc/daskpd/tls"
PLACEHOLDER_IMAGE = "ghcr.io/example/daskpd:latest"

VENV_BIN = Path(sys.executable).parent
DASK_EXE = shutil.which("dask", path=str(VENV_BIN)) or shutil.which("dask")

EXPECTED_FILES = [
    "README.md",
    "Dockerfile",
    "Dockerfile.dockerignore",
    "local/start-cluster.sh",
    "local/stop-cluster.sh",
    "tls/make-certs.sh",
    "tls/start-tls-cluster.sh",
    "tls/dask-tls.yaml",
    "kubernetes/daskjob.yaml",
    "kubernetes/cronjob.yaml",
    "kubernetes/helm-values.yaml",
    "kubernetes/storage.yaml",
    "slurm/jobqueue.yaml",
    "slurm/run_slurm.py",
    "slurm/daskpd.sbatch",
    "cron/daskpd.cron",
]


# --------------------------------------------------------------------------- helpers

def yaml_docs(path: Path) -> list:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def one_doc(path: Path, kind: str | None = None) -> dict:
    docs = yaml_docs(path)
    if kind is not None:
        docs = [d for d in docs if d.get("kind") == kind]
    assert len(docs) == 1, f"{path}: expected exactly one {kind or 'document'}, got {len(docs)}"
    return docs[0]


def flatten(mapping: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}, for dask.config.set without clobbering siblings."""
    out = {}
    for key, value in mapping.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


_MONTHS = {m: i + 1 for i, m in enumerate(
    "jan feb mar apr may jun jul aug sep oct nov dec".split())}
_DAYS = {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())}
_CRON_FIELDS = [(0, 59, None), (0, 23, None), (1, 31, None), (1, 12, _MONTHS), (0, 7, _DAYS)]


def _cron_value(tok: str, lo: int, hi: int, names) -> int:
    if names and tok.lower() in names:
        return names[tok.lower()]
    if not tok.isdigit():
        raise ValueError(f"bad cron value {tok!r}")
    v = int(tok)
    if not lo <= v <= hi:
        raise ValueError(f"cron value {v} outside {lo}-{hi}")
    return v


def check_cron_schedule(expr: str) -> None:
    """Raise ValueError unless expr is a valid 5-field cron schedule."""
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"{expr!r}: expected 5 fields, got {len(fields)}")
    for field, (lo, hi, names) in zip(fields, _CRON_FIELDS):
        for part in field.split(","):
            base, slash, step = part.partition("/")
            if slash and not (step.isdigit() and int(step) > 0):
                raise ValueError(f"bad step in {part!r}")
            if base == "*":
                continue
            a, dash, b = base.partition("-")
            va = _cron_value(a, lo, hi, names)
            if dash and _cron_value(b, lo, hi, names) < va:
                raise ValueError(f"empty range {base!r}")


def script_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DASKPD_") and k not in ("DASK_CONFIG", "DASK_SCHEDULER_ADDRESS")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["DASKPD_DASK"] = DASK_EXE or "dask"
    env["DASKPD_PYTHON"] = sys.executable
    env["PYTHONDONTWRITEBYTECODE"] = "1"   # keep cluster/ free of __pycache__
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(cmd, env=None, timeout=60, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, timeout=timeout,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)


def read_pids(run_dir: Path) -> list[int]:
    pids = []
    for f in sorted(run_dir.glob("*.pid")):
        txt = f.read_text().strip()
        if txt.isdigit():
            pids.append(int(txt))
    return pids


def process_tree(pids) -> list:
    """psutil.Process objects for pids and all their descendants (now)."""
    import psutil

    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs.append(p)
            procs.extend(p.children(recursive=True))
        except psutil.NoSuchProcess:
            pass
    return procs


def still_running(procs, grace: float = 5.0) -> list:
    """The processes that are still running (zombies count as gone) after up to grace s."""
    import psutil

    deadline = time.monotonic() + grace
    while True:
        left = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    left.append(p)
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def kill_all(procs) -> None:
    import psutil

    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def processes_mentioning(text: str) -> list:
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(text in part for part in (p.info["cmdline"] or [])):
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return [p for p in found if p.pid != os.getpid()]


def processes_with_marker(marker: str) -> list:
    """Every process whose environment carries DASKPD_TEST_MARKER=marker: everything a
    script started, including nanny children whose command line names nothing."""
    import psutil

    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get("DASKPD_TEST_MARKER") == marker:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def new_marker() -> str:
    import uuid

    return uuid.uuid4().hex


def require_dask_exe():
    assert DASK_EXE, "the `dask` executable (distributed) is not installed next to this python or on PATH"


def container_specs(pod_spec: dict) -> list:
    return list(pod_spec.get("containers", [])) + list(pod_spec.get("initContainers", []))


def assert_mounts_match_volumes(pod_spec: dict, where: str) -> None:
    volumes = {v["name"] for v in pod_spec.get("volumes", [])}
    for c in container_specs(pod_spec):
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{where}: container {c['name']} mounts unknown volume {m['name']}"
            assert m["mountPath"].startswith("/")


def claim_names(pod_spec: dict) -> set:
    return {v["persistentVolumeClaim"]["claimName"]
            for v in pod_spec.get("volumes", []) if "persistentVolumeClaim" in v}


# --------------------------------------------------------------------------- inventory

def test_expected_files_exist():
    missing = [f for f in EXPECTED_FILES if not (CLUSTER / f).is_file()]
    assert not missing, f"missing in cluster/: {missing}"


def test_readme_mentions_every_file():
    readme = (CLUSTER / "README.md").read_text()
    unmentioned = [f for f in EXPECTED_FILES if f != "README.md" and Path(f).name not in readme]
    assert not unmentioned, f"cluster/README.md does not mention {unmentioned}"


ALL_YAML = sorted(p for p in CLUSTER.rglob("*") if p.suffix in (".yaml", ".yml"))


def test_yaml_inventory_not_empty():
    assert len(ALL_YAML) >= 6, ALL_YAML


@pytest.mark.parametrize("path", ALL_YAML, ids=[str(p.relative_to(CLUSTER)) for p in ALL_YAML])
def test_every_yaml_parses(path):
    docs = yaml_docs(path)
    assert docs, f"{path} has no YAML documents"
    for d in docs:
        assert isinstance(d, dict), f"{path}: top level must be a mapping, got {type(d).__name__}"


# --------------------------------------------------------------------------- cron syntax

@pytest.mark.parametrize("expr", ["15 2 * * *", "*/5 0-6 1,15 jan-dec mon-fri", "0 0 1 1 0", "0 12 * * 7"])
def test_cron_validator_accepts(expr):
    check_cron_schedule(expr)


@pytest.mark.parametrize("expr", ["60 2 * * *", "15 24 * * *", "15 2 * *", "a b c d e", "0 0 0 * *",
                                  "0 0 * 13 *", "*/0 * * * *", "5-1 * * * *"])
def test_cron_validator_rejects(expr):
    with pytest.raises(ValueError):
        check_cron_schedule(expr)


def test_cron_file():
    text = (CLUSTER / "cron" / "daskpd.cron").read_text()
    env_re = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
    jobs, env = [], {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if env_re.match(line):
            k, _, v = line.partition("=")
            env[k] = v
            continue
        parts = line.split(None, 5)
        assert len(parts) == 6, f"not '5 fields + command': {line!r}"
        jobs.append(parts)
    assert len(jobs) == 1, jobs
    for parts in jobs:
        check_cron_schedule(" ".join(parts[:5]))
        command = parts[5]
        assert "daskpd run " in command and "jobs/nightly.toml" in command
        assert "--output" in command
        assert not re.search(r"(?<!\\)%", command), "unescaped % in a cron command becomes a newline"
    assert env.get("SHELL") == "/bin/bash"
    assert "PATH" in env
    # the commented alternatives must be valid lines too once uncommented
    alternatives = [ln[1:].strip() for ln in text.splitlines()
                    if re.match(r"^#\s*(\S+\s+){5}cd ", ln)]
    assert len(alternatives) >= 2
    for alt in alternatives:
        check_cron_schedule(" ".join(alt.split()[:5]))


def daskpd_run_flags_used() -> dict:
    """{where: [--flags]} for every `daskpd run` invocation in cluster/."""
    used = {}
    cron = (CLUSTER / "cron" / "daskpd.cron").read_text()
    for i, ln in enumerate(cron.splitlines()):
        if "daskpd run " in ln and re.match(r"^#?\s*(\S+\s+){5}cd ", ln):
            cmd = ln.split("daskpd run ", 1)[1].split(">>")[0]
            used[f"daskpd.cron:{i + 1}"] = [t for t in cmd.split() if t.startswith("--")]
    job = one_doc(K8S / "daskjob.yaml", "DaskJob")["spec"]["job"]["spec"]["containers"][0]
    cj = one_doc(K8S / "cronjob.yaml", "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    for where, c in (("daskjob.yaml", job), ("cronjob.yaml", cj)):
        used[where] = [t for t in c.get("command", []) + c.get("args", []) if t.startswith("--")]
    for ln in (SLURM / "daskpd.sbatch").read_text().splitlines():
        if ln.startswith('"$DASKPD" run'):
            used["daskpd.sbatch"] = [t for t in ln.split() if t.startswith("--")]
    return used


def test_daskpd_run_flags_exist_in_cli():
    """Every flag the deployment files pass to `daskpd run` is defined by daskpd/cli.py
    (read as text; daskpd is not imported)."""
    cli = ROOT / "daskpd" / "cli.py"
    assert cli.is_file(), "daskpd/cli.py is missing"
    defined = set(re.findall(r'add_argument\(\s*(?:"-\w",\s*)?"(--[a-z][a-z0-9-]*)"', cli.read_text()))
    assert {"--scheduler", "--output"} <= defined, defined
    used = daskpd_run_flags_used()
    assert set(used) >= {"daskjob.yaml", "cronjob.yaml", "daskpd.sbatch"} and len(used) >= 5, used
    unknown = {where: sorted(set(flags) - defined) for where, flags in used.items() if set(flags) - defined}
    assert not unknown, f"flags not defined by `daskpd run`: {unknown}"


# --------------------------------------------------------------------------- shell scripts

SHELL_SCRIPTS = sorted(list(CLUSTER.rglob("*.sh")) + [SLURM / "daskpd.sbatch"])


@pytest.mark.parametrize("path", SHELL_SCRIPTS, ids=[str(p.relative_to(CLUSTER)) for p in SHELL_SCRIPTS])
def test_shell_script_syntax(path):
    res = run(["bash", "-n", path])
    assert res.returncode == 0, res.stderr
    first = path.read_text().splitlines()[0]
    assert first in ("#!/usr/bin/env bash", "#!/bin/bash"), first
    if path.suffix == ".sh":
        assert path.stat().st_mode & stat.S_IXUSR, f"{path} is not executable"


def test_sbatch_directives():
    lines = (SLURM / "daskpd.sbatch").read_text().splitlines()
    first_command = next(i for i, ln in enumerate(lines)
                         if ln.strip() and not ln.lstrip().startswith("#"))
    directives = [ln for ln in lines if ln.startswith("#SBATCH")]
    assert directives
    # sbatch stops reading #SBATCH lines at the first command
    assert all(i < first_command for i, ln in enumerate(lines) if ln.startswith("#SBATCH"))
    opts = {}
    for d in directives:
        m = re.fullmatch(r"#SBATCH --([a-z-]+)=(\S+)", d)
        assert m, f"malformed directive {d!r}"
        opts[m.group(1)] = m.group(2)
    for required in ("job-name", "nodes", "ntasks-per-node", "cpus-per-task", "mem-per-cpu", "time"):
        assert required in opts, required
    assert re.fullmatch(r"\d+:\d\d:\d\d", opts["time"])


# --------------------------------------------------------------------------- Kubernetes

def test_daskjob():
    job = one_doc(K8S / "daskjob.yaml", "DaskJob")
    assert job["apiVersion"] == "kubernetes.dask.org/v1"
    name = job["metadata"]["name"]
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert set(job["spec"]) == {"job", "cluster"}

    job_pod = job["spec"]["job"]["spec"]
    (runner,) = job_pod["containers"]
    argv = runner.get("command", []) + runner.get("args", [])
    assert argv[:3] == ["daskpd", "run", "/jobs/nightly.toml"], argv
    # the operator injects DASK_SCHEDULER_ADDRESS; it is passed on explicitly
    assert argv[argv.index("--scheduler") + 1] == "$(DASK_SCHEDULER_ADDRESS)"
    assert "--output" in argv
    assert job_pod.get("restartPolicy") == "Never"
    assert any(m["mountPath"] == "/jobs" for m in runner["volumeMounts"])
    assert_mounts_match_volumes(job_pod, "job")

    cluster = job["spec"]["cluster"]["spec"]
    assert set(cluster) == {"scheduler", "worker"}
    worker = cluster["worker"]
    assert isinstance(worker["replicas"], int) and worker["replicas"] >= 1
    (wc,) = worker["spec"]["containers"]
    assert wc["args"][:2] == ["dask", "worker"]
    assert "$(DASK_WORKER_NAME)" in wc["args"]
    assert_mounts_match_volumes(worker["spec"], "worker")

    sched = cluster["scheduler"]
    (sc,) = sched["spec"]["containers"]
    assert sc["args"][:2] == ["dask", "scheduler"]
    ports = {p["name"]: p["containerPort"] for p in sc["ports"]}
    # the operator finds the scheduler by these port names
    assert ports == {"tcp-comm": 8786, "http-dashboard": 8787}
    for probe in ("readinessProbe", "livenessProbe"):
        assert sc[probe]["httpGet"]["port"] in ports
        assert sc[probe]["httpGet"]["path"] == "/health"
    svc = sched["service"]
    assert svc["selector"] == {"dask.org/cluster-name": name, "dask.org/component": "scheduler"}
    assert {p["name"]: (p["port"], p["targetPort"]) for p in svc["ports"]} == {
        "tcp-comm": (8786, "tcp-comm"), "http-dashboard": (8787, "http-dashboard")}

    images = {c["image"] for c in (runner, wc, sc)}
    assert images == {PLACEHOLDER_IMAGE}, "runner, scheduler and workers must share one image"


CRONJOB_SPEC_KEYS = {"schedule", "timeZone", "startingDeadlineSeconds", "concurrencyPolicy", "suspend",
                     "jobTemplate", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"}
JOB_SPEC_KEYS = {"parallelism", "completions", "completionMode", "activeDeadlineSeconds", "backoffLimit",
                 "backoffLimitPerIndex", "maxFailedIndexes", "podFailurePolicy", "podReplacementPolicy",
                 "successPolicy", "selector", "manualSelector", "suspend", "managedBy", "template",
                 "ttlSecondsAfterFinished"}


def test_cronjob():
    cj = one_doc(K8S / "cronjob.yaml", "CronJob")
    assert cj["apiVersion"] == "batch/v1"
    spec = cj["spec"]
    assert set(spec) <= CRONJOB_SPEC_KEYS, set(spec) - CRONJOB_SPEC_KEYS
    check_cron_schedule(spec["schedule"])
    assert spec["concurrencyPolicy"] in ("Allow", "Forbid", "Replace")
    job_spec = spec["jobTemplate"]["spec"]
    assert set(job_spec) <= JOB_SPEC_KEYS, set(job_spec) - JOB_SPEC_KEYS
    pod = job_spec["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")  # Jobs reject Always
    (c,) = pod["containers"]
    assert c["image"] == PLACEHOLDER_IMAGE
    argv = c.get("command", []) + c.get("args", [])
    assert argv[:3] == ["daskpd", "run", "/jobs/nightly.toml"], argv
    assert "--output" in argv
    assert_mounts_match_volumes(pod, "cronjob")

    # it talks to the scheduler Service that helm-values.yaml creates
    values = one_doc(K8S / "helm-values.yaml")
    expected = f"tcp://{values['fullnameOverride']}-scheduler:{values['scheduler']['servicePort']}"
    assert argv[argv.index("--scheduler") + 1] == expected


# keys of the dask/dask Helm chart's values.yaml (helm.dask.org)
HELM_KEYS = {
    "": {"nameOverride", "fullnameOverride", "scheduler", "webUI", "worker",
         "additional_worker_groups", "jupyter"},
    "scheduler": {"name", "enabled", "image", "replicas", "serviceType", "loadBalancerIP", "servicePort",
                  "serviceAnnotations", "extraArgs", "resources", "tolerations", "affinity", "nodeSelector",
                  "securityContext", "serviceAccountName", "metrics", "livenessProbe", "readinessProbe", "env"},
    "webUI": {"name", "servicePort", "ingress"},
    "worker": {"name", "image", "replicas", "strategy", "custom_scheduler_url", "default_resources", "env",
               "extraArgs", "resources", "mounts", "annotations", "tolerations", "affinity", "nodeSelector",
               "securityContext", "serviceAccountName", "port", "portDashboard", "threads_per_worker",
               "metrics", "livenessProbe", "readinessProbe"},
    "jupyter": {"name", "enabled", "rbac", "image", "serviceType", "servicePort", "password", "passwordHint",
                "env", "command", "args", "extraConfig", "resources", "mounts", "tolerations", "affinity",
                "nodeSelector", "securityContext", "serviceAccountName", "ingress", "livenessProbe",
                "readinessProbe"},
}
HELM_IMAGE_KEYS = {"repository", "tag", "pullPolicy", "pullSecrets", "dask_worker"}


def test_helm_values():
    v = one_doc(K8S / "helm-values.yaml")
    assert set(v) <= HELM_KEYS[""], set(v) - HELM_KEYS[""]
    for section in ("scheduler", "webUI", "worker", "jupyter"):
        if section in v:
            extra = set(v[section]) - HELM_KEYS[section]
            assert not extra, f"{section}: keys the chart does not know: {extra}"
    assert v["jupyter"]["enabled"] is False
    for section in ("scheduler", "worker"):
        img = v[section]["image"]
        assert set(img) <= HELM_IMAGE_KEYS
        assert f"{img['repository']}:{img['tag']}" == PLACEHOLDER_IMAGE
    assert v["scheduler"]["servicePort"] == 8786
    w = v["worker"]
    assert isinstance(w["replicas"], int) and w["replicas"] >= 1
    assert {"cpu", "memory"} <= set(w["resources"]["limits"])
    mounts = w["mounts"]
    assert_mounts_match_volumes({"volumes": mounts["volumes"],
                                 "containers": [{"name": "worker", "volumeMounts": mounts["volumeMounts"]}]},
                                "helm worker")


def test_storage_claims_cover_every_reference():
    pvcs = [d for d in yaml_docs(K8S / "storage.yaml") if d["kind"] == "PersistentVolumeClaim"]
    assert all(d["apiVersion"] == "v1" for d in pvcs)
    defined = {d["metadata"]["name"] for d in pvcs}
    job = one_doc(K8S / "daskjob.yaml", "DaskJob")
    cj = one_doc(K8S / "cronjob.yaml", "CronJob")
    values = one_doc(K8S / "helm-values.yaml")
    used = (claim_names(job["spec"]["job"]["spec"])
            | claim_names(job["spec"]["cluster"]["spec"]["worker"]["spec"])
            | claim_names(cj["spec"]["jobTemplate"]["spec"]["template"]["spec"])
            | claim_names({"volumes": values["worker"]["mounts"]["volumes"]}))
    assert used and used <= defined, used - defined


def test_dockerfile():
    text = (CLUSTER / "Dockerfile").read_text()
    # join continuation lines, drop comments, check every instruction keyword
    logical, buf = [], ""
    for ln in text.splitlines():
        if not buf and (not ln.strip() or ln.lstrip().startswith("#")):
            continue
        buf += ln.rstrip("\\").strip() + " "
        if not ln.rstrip().endswith("\\"):
            logical.append(buf.strip())
            buf = ""
    assert not buf, "dangling line continuation"
    keywords = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
    instrs = [(ln.split()[0], ln) for ln in logical]
    assert all(k in keywords for k, _ in instrs), [k for k, _ in instrs if k not in keywords]
    assert instrs[0][0] == "FROM"
    assert any(k == "COPY" and ln.split()[1] == "." for k, ln in instrs)
    assert any(k == "RUN" and re.search(r"pip install \.(\s|$)", ln) for k, ln in instrs)
    for k, ln in instrs:
        if k in ("ENTRYPOINT", "CMD"):
            json.loads(ln[len(k):])  # exec form
    # the Helm chart calls dask-scheduler / dask-worker
    assert "/usr/local/bin/dask-scheduler" in text and "/usr/local/bin/dask-worker" in text


# --------------------------------------------------------------------------- SLURM

KNOWN_SLURM_KEYS = {
    "name", "cores", "memory", "processes", "python", "interface", "death-timeout", "local-directory",
    "shared-temp-directory", "extra", "worker-command", "worker-extra-args", "shebang", "queue",
    "account", "project", "walltime", "env-extra", "job-script-prologue", "job-cpu", "job-mem",
    "job-extra", "job-extra-directives", "job-directives-skip", "log-directory", "scheduler-options",
}
DEPRECATED_SLURM_KEYS = {"extra", "env-extra", "job-extra", "project"}


def test_jobqueue_yaml():
    from dask.utils import parse_bytes

    cfg = one_doc(SLURM / "jobqueue.yaml")
    assert set(cfg) == {"jobqueue"}
    slurm = cfg["jobqueue"]["slurm"]
    assert set(slurm) <= KNOWN_SLURM_KEYS, set(slurm) - KNOWN_SLURM_KEYS
    assert not set(slurm) & DEPRECATED_SLURM_KEYS
    assert isinstance(slurm["cores"], int) and slurm["cores"] >= 1
    assert parse_bytes(slurm["memory"]) >= 2**30
    assert isinstance(slurm["processes"], int) and slurm["cores"] % slurm["processes"] == 0
    assert re.fullmatch(r"\d+:\d\d:\d\d", slurm["walltime"])
    assert all(isinstance(d, str) and d.startswith("-") for d in slurm["job-extra-directives"])
    assert all(isinstance(s, str) for s in slurm["job-script-prologue"])
    # HTTP servers on loopback unless the site asks otherwise (issue 14)
    assert slurm["scheduler-options"]["dashboard_address"].startswith("127.0.0.1:")
    args = slurm["worker-extra-args"]
    assert args[args.index("--dashboard-address") + 1] == "127.0.0.1:0"


def test_jobqueue_yaml_keys_match_installed_dask_jobqueue():
    """The keys against the installed dask-jobqueue's own defaults (its jobqueue.yaml)."""
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is not installed (the `test` extra has it)")
    import importlib.util

    origin = Path(importlib.util.find_spec("dask_jobqueue").origin).parent / "jobqueue.yaml"
    real = set(one_doc(origin)["jobqueue"]["slurm"])
    ours = set(one_doc(SLURM / "jobqueue.yaml")["jobqueue"]["slurm"])
    assert ours <= real, f"jobqueue.yaml keys dask-jobqueue does not know: {ours - real}"
    assert real <= KNOWN_SLURM_KEYS, f"dask-jobqueue has new keys; update KNOWN_SLURM_KEYS: {real - KNOWN_SLURM_KEYS}"


def test_run_slurm_imports_nothing_optional_at_module_level(tmp_path):
    py_compile.compile(str(SLURM / "run_slurm.py"), cfile=str(tmp_path / "run_slurm.pyc"), doraise=True)
    code = textwrap.dedent(f"""
        import runpy, sys
        sys.modules["daskpd"] = None          # make any import of these fail
        sys.modules["dask_jobqueue"] = None
        sys.path.insert(0, {str(SLURM)!r})
        import run_slurm
        import yaml
        flat = run_slurm.load_jobqueue_config(run_slurm.DEFAULT_CONFIG)
        slurm = yaml.safe_load(open(run_slurm.DEFAULT_CONFIG))["jobqueue"]["slurm"]
        assert flat == {{f"jobqueue.slurm.{{k}}": v for k, v in slurm.items()}}, flat
        sys.argv = ["run_slurm.py", "spec.toml"]
        try:
            runpy.run_path({str(SLURM / 'run_slurm.py')!r}, run_name="__main__")
        except SystemExit as e:
            print("EXIT", e.code)
    """)
    res = run([sys.executable, "-c", code], env=script_env(), timeout=60)
    assert res.returncode == 0, res.stderr
    assert "EXIT 2" in res.stdout
    assert "dask-jobqueue is not installed" in res.stderr


FAKE_JOBQUEUE = '''
"""Stand-in for dask_jobqueue: SLURMCluster on top of an in-process LocalCluster."""
import json, os
import dask
from distributed import LocalCluster

_LOG = os.environ["FAKE_JOBQUEUE_LOG"]
_KEYS = ("cores", "memory", "processes", "walltime", "queue", "account", "job-extra-directives",
         "job-script-prologue", "scheduler-options", "shebang", "death-timeout")


def _log(**kw):
    data = json.load(open(_LOG)) if os.path.exists(_LOG) else {}
    data.update(kw)
    json.dump(data, open(_LOG, "w"))


class SLURMCluster(LocalCluster):
    def __init__(self, config_name="slurm", **kwargs):
        _log(config={k: dask.config.get(f"jobqueue.{config_name}.{k}") for k in _KEYS}, kwargs=kwargs)
        super().__init__(n_workers=0, threads_per_worker=1, processes=False, dashboard_address=None)

    def scale(self, n=None, jobs=0, memory=None, cores=None):
        if jobs:                            # LocalCluster itself calls scale(n) internally
            _log(scaled_jobs=jobs)
            return super().scale(jobs)      # one worker per "job"
        return super().scale(n)

    def job_script(self):
        return "#!/usr/bin/env bash\\n#SBATCH --fake\\n"

    def close(self, *args, **kwargs):
        _log(closed=True)
        return super().close(*args, **kwargs)
'''

FAKE_RUN_JOB = '''
"""Stand-in for daskpd.job.run: connect, compute, write a result."""
import json
from pathlib import Path


def run_job(spec_path, scheduler=None, output=None):
    from distributed import Client

    with Client(scheduler, timeout=20, set_as_default=False) as c:
        n = len(c.nthreads())
        total = c.submit(sum, range(10)).result()
    Path(output).mkdir(parents=True, exist_ok=True)
    (Path(output) / "result.json").write_text(json.dumps(
        {"spec": str(spec_path), "scheduler": scheduler, "workers": n, "total": total}))
'''


@pytest.mark.cluster
def test_run_slurm_end_to_end_with_stand_ins(tmp_path):
    fake = tmp_path / "fake"
    (fake / "dask_jobqueue").mkdir(parents=True)
    (fake / "dask_jobqueue" / "__init__.py").write_text(FAKE_JOBQUEUE)
    (fake / "daskpd" / "job").mkdir(parents=True)
    (fake / "daskpd" / "__init__.py").write_text("")
    (fake / "daskpd" / "job" / "__init__.py").write_text("")
    (fake / "daskpd" / "job" / "run.py").write_text(FAKE_RUN_JOB)
    log, out = tmp_path / "jobqueue-log.json", tmp_path / "out"
    env = script_env(PYTHONPATH=fake, FAKE_JOBQUEUE_LOG=log)
    res = run([sys.executable, SLURM / "run_slurm.py", "jobs/nightly.toml", "--jobs", "2",
               "--min-workers", "2", "--wait-timeout", "30", "--output", out], env=env, timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr

    result = json.loads((out / "result.json").read_text())
    assert result["spec"] == "jobs/nightly.toml"
    assert result["workers"] == 2 and result["total"] == 45
    assert result["scheduler"].startswith(("tcp://", "inproc://"))

    seen = json.loads(log.read_text())
    slurm = one_doc(SLURM / "jobqueue.yaml")["jobqueue"]["slurm"]
    for key, value in seen["config"].items():
        assert value == slurm[key], f"jobqueue.slurm.{key}: SLURMCluster saw {value!r}"
    assert seen["kwargs"] == {}          # everything comes from the config file
    assert seen["scaled_jobs"] == 2
    assert seen["closed"] is True


FAKE_SRUN = r'''#!/usr/bin/env bash
# srun stand-in: run the command once per task, locally; forward SIGTERM to the tasks.
echo "$*" >> "$FAKE_SRUN_LOG"
n="${SLURM_NTASKS:-1}"
while [[ $# -gt 0 && "$1" == -* ]]; do
    case "$1" in --ntasks=*) n="${1#--ntasks=}" ;; esac
    shift
done
pids=()
for (( i = 0; i < n; i++ )); do SLURM_PROCID=$i "$@" & pids+=($!); done
trap 'kill -TERM "${pids[@]}" 2>/dev/null' TERM INT
wait
wait
'''

FAKE_DASKPD = '''#!{python}
"""daskpd stand-in: `daskpd run SPEC --scheduler ADDR --output DIR`."""
import json, sys
from pathlib import Path
from distributed import Client

args = sys.argv[1:]
assert args[0] == "run", args
spec, sched, out = args[1], args[args.index("--scheduler") + 1], args[args.index("--output") + 1]
with Client(sched, timeout=20, set_as_default=False) as c:
    n = len(c.nthreads())
    total = c.submit(sum, range(10)).result()
Path(out).mkdir(parents=True, exist_ok=True)
(Path(out) / "result.json").write_text(json.dumps(
    {{"spec": spec, "scheduler": sched, "workers": n, "total": total}}))
'''


def loopback_interface() -> str:
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    raise AssertionError("no interface with 127.0.0.1")


@pytest.mark.cluster
def test_sbatch_end_to_end_with_fake_srun(tmp_path):
    require_dask_exe()
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "srun").write_text(FAKE_SRUN)
    (fakebin / "daskpd").write_text(FAKE_DASKPD.format(python=sys.executable))
    for f in fakebin.iterdir():
        f.chmod(0o755)
    run_dir, out, srun_log = tmp_path / "run", tmp_path / "out", tmp_path / "srun.log"
    env = script_env(
        SLURM_JOB_ID="4242", SLURM_NTASKS="2", SLURM_CPUS_PER_TASK="1", SLURM_MEM_PER_CPU="1024",
        SLURM_SUBMIT_DIR=tmp_path, DASKPD_RUN_DIR=run_dir, DASKPD_OUTPUT=out,
        DASKPD_SPEC="jobs/nightly.toml", DASKPD_INTERFACE=loopback_interface(),
        DASKPD_SCHEDULER_PORT=free_port(), DASKPD_DASHBOARD_ADDRESS="127.0.0.1:0",
        DASKPD_WAIT_TIMEOUT="45", FAKE_SRUN_LOG=srun_log, DASKPD_TEST_MARKER=(marker := new_marker()),
    )
    env["PATH"] = f"{fakebin}{os.pathsep}{env['PATH']}"
    try:
        res = run(["bash", SLURM / "daskpd.sbatch"], env=env, timeout=120, cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        result = json.loads((out / "result.json").read_text())
        assert result == {"spec": "jobs/nightly.toml", "scheduler": result["scheduler"],
                          "workers": 2, "total": 45}
        assert result["scheduler"].startswith("tcp://127.0.0.1:")
        srun_args = srun_log.read_text()
        assert "--ntasks=2" in srun_args
        assert "--memory-limit 921MiB" in srun_args        # 90% of 1 cpu x 1024 MB
        assert "--nthreads 1" in srun_args
        leftover = still_running(processes_with_marker(marker))
        assert not leftover, [p.cmdline() for p in leftover]
    finally:
        kill_all(processes_with_marker(marker) + processes_mentioning(str(run_dir)))


# --------------------------------------------------------------------------- TLS config (static)

def test_tls_yaml_keys():
    cfg = one_doc(TLS_YAML)
    comm = cfg["distributed"]["comm"]
    assert comm["require-encryption"] is True
    tls = comm["tls"]
    files = {"ca-file": tls["ca-file"]}
    for role in ("scheduler", "worker", "client"):
        assert set(tls[role]) == {"cert", "key"}
        files[f"{role}.cert"] = tls[role]["cert"]
        files[f"{role}.key"] = tls[role]["key"]
    # exactly the names make-certs.sh writes, in one directory
    expected = {"ca-file": "ca.pem", **{f"{r}.cert": f"{r}.pem" for r in ("scheduler", "worker", "client")},
                **{f"{r}.key": f"{r}.key" for r in ("scheduler", "worker", "client")}}
    assert {k: Path(v).name for k, v in files.items()} == expected
    assert {str(Path(v).parent) for v in files.values()} == {TLS_PLACEHOLDER_DIR}
    # and they are distributed's real keys: Security() picks them up
    import dask
    from distributed.security import Security

    with dask.config.set(flatten(cfg)):
        sec = Security()
    assert sec.require_encryption is True
    assert sec.tls_ca_file == files["ca-file"]
    assert sec.tls_scheduler_cert == files["scheduler.cert"]
    assert sec.tls_worker_key == files["worker.key"]
    assert sec.tls_client_cert == files["client.cert"]


# --------------------------------------------------------------------------- real clusters

@pytest.mark.cluster
def test_local_cluster_start_stop(tmp_path):
    require_dask_exe()
    from distributed import Client

    port = free_port()
    run_dir = tmp_path / "run"
    env = script_env(DASKPD_SCHEDULER_PORT=port, DASKPD_DASHBOARD_PORT=free_port(),
                     DASKPD_RUN_DIR=run_dir, DASKPD_NTHREADS=1, DASKPD_MEMORY_LIMIT="1GiB",
                     DASKPD_START_TIMEOUT=45, DASKPD_TEST_MARKER=(marker := new_marker()))
    procs, stop, leftover = [], None, []
    try:
        res = run([START, "2"], env=env, timeout=90)
        procs = process_tree(read_pids(run_dir))
        assert res.returncode == 0, res.stderr
        addr = f"tcp://127.0.0.1:{port}"
        assert res.stdout.strip() == addr            # stdout is only the address
        assert (run_dir / "address").read_text().strip() == addr
        assert len(read_pids(run_dir)) == 3          # scheduler + 2 workers

        with Client(addr, timeout=15) as client:
            workers = client.nthreads()
            assert len(workers) == 2
            assert all(w.startswith("tcp://127.0.0.1:") for w in workers)
            assert sorted(client.gather(client.map(lambda x: x * x, range(10)))) == [x * x for x in range(10)]
            assert client.submit(sum, range(101)).result() == 5050
            # the workers are the processes the script started
            worker_pids = set(client.run(os.getpid).values())
            assert worker_pids <= {p.pid for p in procs}
            assert {p.pid for p in procs} <= {p.pid for p in processes_with_marker(marker)}

        again = run([START, "2"], env=env, timeout=30)
        assert again.returncode != 0 and "still running" in again.stderr
    finally:
        stop = run([STOP, run_dir], env=env, timeout=60)
        leftover = still_running(procs + processes_with_marker(marker))
        kill_all(leftover)
    assert stop.returncode == 0, stop.stderr
    assert procs and not leftover, [p.cmdline() for p in leftover]
    assert not list(run_dir.glob("*.pid"))
    assert run([STOP, run_dir], env=env, timeout=30).returncode == 0      # idempotent


@pytest.mark.cluster
def test_local_cluster_start_failure_cleans_up(tmp_path):
    """Scheduler port already taken: the script must fail fast and leave nothing running."""
    require_dask_exe()
    run_dir = tmp_path / "run"
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        env = script_env(DASKPD_SCHEDULER_PORT=port, DASKPD_DASHBOARD_PORT="none", DASKPD_RUN_DIR=run_dir,
                         DASKPD_NTHREADS=1, DASKPD_MEMORY_LIMIT="1GiB", DASKPD_START_TIMEOUT=45,
                         DASKPD_TEST_MARKER=(marker := new_marker()))
        try:
            res = run([START, "1"], env=env, timeout=90)
            assert res.returncode != 0
            assert res.stdout == ""                       # no address printed
            # noticed as an exit, not waited out (the start-up timeout has its own message)
            assert "exited during start-up" in res.stderr, res.stderr
            leftover = still_running(processes_with_marker(marker))
            assert not leftover, [p.cmdline() for p in leftover]
            assert not list(run_dir.glob("*.pid"))
        finally:
            kill_all(processes_with_marker(marker))


def make_certs(directory: Path) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (needed by cluster/tls/make-certs.sh)")
    res = run([MAKE_CERTS, directory], env=script_env(), timeout=60)
    assert res.returncode == 0, res.stderr
    return directory


@pytest.fixture(scope="module")
def tls_certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("tls") / "certs")


@pytest.fixture(scope="module")
def tls_cluster(tls_certs, tmp_path_factory):
    """A TLS-only scheduler + 1 worker started by start-tls-cluster.sh."""
    require_dask_exe()
    port = free_port()
    run_dir = tmp_path_factory.mktemp("tlsrun")
    marker = new_marker()
    env = script_env(DASKPD_SCHEDULER_PORT=port, DASKPD_DASHBOARD_PORT="none", DASKPD_RUN_DIR=run_dir,
                     DASKPD_NTHREADS=1, DASKPD_MEMORY_LIMIT="1GiB", DASKPD_START_TIMEOUT=45,
                     DASKPD_TEST_MARKER=marker)
    procs = []
    try:
        res = run([START_TLS, tls_certs, "1"], env=env, timeout=90)
        procs = process_tree(read_pids(run_dir))
        assert res.returncode == 0, res.stderr
        addr = res.stdout.strip()
        assert addr == f"tls://127.0.0.1:{port}"
        yield {"addr": addr, "port": port, "certs": tls_certs, "procs": procs}
    finally:
        stop = run([STOP, run_dir], env=env, timeout=60)
        leftover = still_running(procs + processes_with_marker(marker))
        kill_all(leftover)
        assert stop.returncode == 0, stop.stderr
        assert not leftover, [p.cmdline() for p in leftover]


def client_security(certs: Path):
    from distributed.security import Security

    return Security(tls_ca_file=str(certs / "ca.pem"), tls_client_cert=str(certs / "client.pem"),
                    tls_client_key=str(certs / "client.key"), require_encryption=True)


@pytest.mark.cluster
def test_make_certs(tls_certs):
    d = tls_certs
    for role in ("ca", "scheduler", "worker", "client"):
        assert (d / f"{role}.pem").is_file()
        assert stat.S_IMODE((d / f"{role}.key").stat().st_mode) == 0o600
    for role in ("scheduler", "worker", "client"):
        v = run(["openssl", "verify", "-CAfile", d / "ca.pem", d / f"{role}.pem"])
        assert v.returncode == 0, v.stdout + v.stderr
        san = run(["openssl", "x509", "-in", d / f"{role}.pem", "-noout", "-text"]).stdout
        assert "DNS:localhost" in san and "IP Address:127.0.0.1" in san
    # the rendered config points at this directory, and only there
    rendered = one_doc(d / "dask-tls.yaml")
    flat = flatten(rendered)
    paths = [v for k, v in flat.items() if k.endswith(("ca-file", ".cert", ".key"))]
    assert len(paths) == 7 and all(Path(p).parent == d and Path(p).is_file() for p in paths)
    # a second run must not clobber the CA
    again = run([MAKE_CERTS, d], env=script_env())
    assert again.returncode != 0 and "--force" in again.stderr


@pytest.mark.cluster
def test_tls_cluster_serves_tls_clients(tls_cluster):
    from distributed import Client

    with Client(tls_cluster["addr"], security=client_security(tls_cluster["certs"]), timeout=15) as client:
        workers = client.nthreads()
        assert len(workers) == 1
        assert all(w.startswith("tls://127.0.0.1:") for w in workers)
        assert client.submit(lambda x: x + 1, 41).result() == 42
        assert client.scheduler_info()["address"] == tls_cluster["addr"]


def assert_client_refused(expected, address, match=None, **kwargs):
    """Client(address, timeout=3, **kwargs) must raise one of the expected types."""
    from distributed import Client

    try:
        with pytest.raises(expected, match=match):
            Client(address, timeout=3, set_as_default=False, **kwargs)
    finally:
        # The half-built Client is kept alive by a reference cycle (exception ->
        # traceback -> frames).  Collect it now, on this thread: finalised later by
        # a collection that happens to run on distributed's IO-loop thread, its
        # __del__ blocks that loop for seconds while closing itself.
        gc.collect()


@pytest.mark.cluster
def test_tls_cluster_refuses_plain_tcp(tls_cluster):
    # plain TCP to the TLS port: the server drops the connection
    # (observed: distributed.comm.core.CommClosedError, an OSError)
    assert_client_refused((OSError, TimeoutError), f"tcp://127.0.0.1:{tls_cluster['port']}")


@pytest.mark.cluster
def test_tls_cluster_refuses_client_without_certificates(tls_cluster):
    # the tls:// address without Security: there is no SSL context to connect with
    assert_client_refused(TypeError, tls_cluster["addr"], match="ssl_context")


@pytest.mark.cluster
def test_require_encryption_refuses_tcp(tls_cluster):
    # require_encryption=True on the client side refuses tcp:// before connecting
    assert_client_refused(RuntimeError, f"tcp://127.0.0.1:{tls_cluster['port']}",
                          match="encryption required", security=client_security(tls_cluster["certs"]))


@pytest.mark.cluster
def test_tls_cluster_refuses_foreign_ca(tls_cluster, tmp_path):
    # certificates from another CA: the handshake fails
    # (observed: distributed.comm.core.FatalCommClosedError, an OSError)
    foreign = make_certs(tmp_path / "foreign")
    assert_client_refused((OSError, TimeoutError), tls_cluster["addr"], security=client_security(foreign))


def tls_config_for(certs: Path) -> dict:
    """cluster/tls/dask-tls.yaml with its placeholder directory replaced by certs."""
    text = TLS_YAML.read_text().replace(TLS_PLACEHOLDER_DIR, str(certs))
    return flatten(yaml.safe_load(text))


@pytest.mark.cluster
def test_tls_yaml_via_dask_config_set(tls_cluster):
    import dask
    from distributed import Client
    from distributed.security import Security

    with dask.config.set(tls_config_for(tls_cluster["certs"])):
        sec = Security()                      # reads distributed.comm.tls.* / require-encryption
        assert sec.require_encryption is True
        with Client(tls_cluster["addr"], security=sec, timeout=15) as client:
            assert client.submit(sum, [1, 2, 3]).result() == 6
        with Client(tls_cluster["addr"], timeout=15) as client:     # Client builds Security() itself
            assert client.submit(sum, [4, 5]).result() == 9
        assert_client_refused(RuntimeError, f"tcp://127.0.0.1:{tls_cluster['port']}",
                              match="encryption required")


@pytest.mark.cluster
def test_tls_yaml_via_DASK_CONFIG_env(tls_cluster):
    rendered = tls_cluster["certs"] / "dask-tls.yaml"     # written by make-certs.sh
    code = textwrap.dedent(f"""
        from distributed import Client
        from distributed.security import Security
        assert Security().require_encryption is True
        with Client({tls_cluster['addr']!r}, timeout=15) as c:
            print("RESULT", c.submit(lambda: 6 * 7).result())
    """)
    res = run([sys.executable, "-c", code], env=script_env(DASK_CONFIG=rendered), timeout=60)
    assert res.returncode == 0, res.stderr
    assert "RESULT 42" in res.stdout
