"""Offline checks of everything in deploy/ (run by tests/deploy/check.sh, which installs the
tools and passes their paths).

Each check prints `ok: ...` or `FAIL: ...` with the reason; all of them run, and the last line
counts them ("N passed, M failed"). Nothing here needs a network, a cluster or a Docker engine.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
import urllib.parse
from pathlib import Path

import yaml
from dockerfile_parse import DockerfileParser

# The repository; tests/deploy/mutations.py points it at a copy with one thing broken.
ROOT = Path(os.environ.get("DEPLOY_CHECK_ROOT") or Path(__file__).resolve().parents[2]).resolve()
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
README = DEPLOY / "README.md"
DASHBOARD = ROOT / "dashboards" / "manifold.json"
PROVIDER = ROOT / "dashboards" / "provisioning" / "dashboards" / "manifold.yaml"
PROMETHEUS_YML = K8S / "monitoring" / "prometheus.yml"
DATASOURCE = K8S / "monitoring" / "grafana-datasource.yaml"

# The kustomizations: each folder alone, and all of them together.
KUSTOMIZATIONS = ["manifold", "redis", "monitoring", "."]
# Kubernetes releases the manifests are validated against: the oldest supported and the newest
# whose schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = ["1.30.0", "1.37.0"]


# Pod-level labels Prometheus' Kubernetes discovery sets for role "pod" (besides the
# __meta_kubernetes_pod_label_*, _labelpresent_*, _annotation_* and _annotationpresent_*
# families), and __meta_kubernetes_namespace.
POD_META_LABELS = {
    "__meta_kubernetes_namespace",
    "__meta_kubernetes_pod_name",
    "__meta_kubernetes_pod_ip",
    "__meta_kubernetes_pod_container_init",
    "__meta_kubernetes_pod_container_name",
    "__meta_kubernetes_pod_container_id",
    "__meta_kubernetes_pod_container_image",
    "__meta_kubernetes_pod_container_port_name",
    "__meta_kubernetes_pod_container_port_number",
    "__meta_kubernetes_pod_container_port_protocol",
    "__meta_kubernetes_pod_ready",
    "__meta_kubernetes_pod_phase",
    "__meta_kubernetes_pod_node_name",
    "__meta_kubernetes_pod_host_ip",
    "__meta_kubernetes_pod_uid",
    "__meta_kubernetes_pod_controller_kind",
    "__meta_kubernetes_pod_controller_name",
}
POD_META_FAMILIES = (
    "__meta_kubernetes_pod_label_",
    "__meta_kubernetes_pod_labelpresent_",
    "__meta_kubernetes_pod_annotation_",
    "__meta_kubernetes_pod_annotationpresent_",
)
# The keys of a kubernetes_sd_configs entry (Prometheus' configuration reference).
KUBERNETES_SD_KEYS = {
    "api_server",
    "role",
    "kubeconfig_file",
    "namespaces",
    "selectors",
    "attach_metadata",
    "basic_auth",
    "authorization",
    "oauth2",
    "proxy_url",
    "no_proxy",
    "proxy_from_environment",
    "proxy_connect_header",
    "follow_redirects",
    "enable_http2",
    "tls_config",
}
KUBERNETES_SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}


class CheckFailed(Exception):
    pass


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


class Context:
    """Tools, and what is rendered once and shared by the checks."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.manifold = Path(args.manifold).resolve()
        self.promtool = args.promtool
        self.kubectl = args.kubectl
        self.hadolint = args.hadolint
        self.kubernetes_validate = args.kubernetes_validate
        self.cargo = shutil.which("cargo")
        self._rendered: dict[str, str] = {}

    def render(self, name: str) -> str:
        """The output of `kubectl kustomize` for deploy/kubernetes/<name>."""
        if name not in self._rendered:
            folder = K8S / name
            result = subprocess.run(
                [self.kubectl, "kustomize", str(folder)],
                capture_output=True,
                text=True,
                check=False,
            )
            if result.returncode != 0:
                raise CheckFailed(f"kubectl kustomize {rel(folder)} failed:\n{result.stderr.strip()}")
            self._rendered[name] = result.stdout
        return self._rendered[name]

    def objects(self, name: str = ".") -> list[dict]:
        return [doc for doc in yaml.safe_load_all(self.render(name)) if doc]


def find(objects: list[dict], kind: str, name: str) -> dict:
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    require(len(hits) == 1, f"expected one {kind} {name!r} in the rendered manifests, found {len(hits)}")
    return hits[0]


def generated(objects: list[dict], kind: str, name: str) -> dict:
    """A ConfigMap or Secret made by a kustomize generator: its name gets a hash suffix."""
    hits = [
        o
        for o in objects
        if o["kind"] == kind and re.fullmatch(re.escape(name) + r"-[a-z0-9]{10}", o["metadata"]["name"])
    ]
    require(len(hits) == 1, f"expected one generated {kind} {name!r}, found {len(hits)}")
    return hits[0]


def pod_spec(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]


def container(deployment: dict, name: str) -> dict:
    hits = [c for c in pod_spec(deployment)["containers"] if c["name"] == name]
    require(len(hits) == 1, f"Deployment {deployment['metadata']['name']}: no container {name!r}")
    return hits[0]


def port_number(c: dict, port) -> int:
    """A probe's or Service's port (a number, or a container port's name) as a number."""
    if isinstance(port, int):
        return port
    for p in c.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise CheckFailed(f"container {c['name']!r} declares no port named {port!r}")


def mount_of_volume(deployment: dict, c: dict, source_kind: str, source_name: str) -> str:
    """Where container c mounts the volume made from ConfigMap/Secret source_name."""
    volumes = pod_spec(deployment).get("volumes", [])
    for v in volumes:
        if source_kind == "configMap" and v.get("configMap", {}).get("name") == source_name:
            break
        if source_kind == "secret" and v.get("secret", {}).get("secretName") == source_name:
            break
    else:
        raise CheckFailed(
            f"Deployment {deployment['metadata']['name']}: no volume from {source_kind} {source_name!r}"
        )
    mounts = [m for m in c.get("volumeMounts", []) if m["name"] == v["name"]]
    require(len(mounts) == 1, f"container {c['name']!r} does not mount volume {v['name']!r}")
    require(
        not mounts[0].get("subPath"),
        f"volume {v['name']!r} is mounted with subPath (ConfigMap updates never reach it)",
    )
    return mounts[0]["mountPath"]


def duration_seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    require(m is not None, f'{text!r} is not a duration like "5s"')
    value, unit = float(m.group(1)), m.group(2)
    return value * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def listen_port(address: str) -> int:
    return int(address.rsplit(":", 1)[1]) if ":" in address else int(address)


def manifold_config_text(ctx: Context) -> str:
    cm = generated(ctx.objects("manifold"), "ConfigMap", "manifold-config")
    require("manifold.toml" in cm.get("data", {}), "ConfigMap manifold-config has no manifold.toml")
    return cm["data"]["manifold.toml"]


def manifold_deployment(ctx: Context) -> dict:
    return find(ctx.objects("manifold"), "Deployment", "manifold")


def env_placeholders(text: str) -> list[str]:
    """The ${VAR}s in the config's values (comments are not interpolated; `$$` is a literal
    dollar sign)."""
    found: set[str] = set()

    def walk(value) -> None:
        if isinstance(value, str):
            found.update(re.findall(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)\}", value.replace("$$", "")))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(tomllib.loads(text))
    return sorted(found)


# --- Dockerfile ---------------------------------------------------------------------------------


def dockerfile_stages() -> list[dict]:
    parser = DockerfileParser(path=str(DOCKERFILE))
    stages: list[dict] = []
    for instr in parser.structure:
        if instr["instruction"] == "FROM":
            words = instr["value"].split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append({"image": words[0], "name": name, "instructions": []})
        elif instr["instruction"] != "COMMENT":
            require(
                bool(stages) or instr["instruction"] == "ARG", f"{instr['instruction']} before the first FROM"
            )
            if stages:
                stages[-1]["instructions"].append(instr)
    return stages


def instructions(stage: dict, kind: str) -> list[str]:
    return [i["value"] for i in stage["instructions"] if i["instruction"] == kind]


def dockerfile_user_uid() -> int:
    final = dockerfile_stages()[-1]
    users = instructions(final, "USER")
    require(users, "the final stage sets no USER (it would run as root)")
    user = users[-1].split(":")[0]
    require(user.isdigit(), f"USER {user!r} is not numeric: Kubernetes' runAsNonRoot cannot verify a name")
    return int(user)


def dockerfile_healthcheck() -> list[str]:
    final = dockerfile_stages()[-1]
    checks = instructions(final, "HEALTHCHECK")
    require(checks, "the final stage has no HEALTHCHECK")
    text = checks[-1]
    require(not text.strip().upper().startswith("NONE"), "HEALTHCHECK NONE")
    cmd = re.search(r"\bCMD\s+(.*)$", text, re.S)
    require(cmd is not None, f"HEALTHCHECK without CMD: {text!r}")
    try:
        argv = json.loads(cmd.group(1))
    except json.JSONDecodeError as e:
        raise CheckFailed(f"HEALTHCHECK CMD is not exec form (a JSON array): {e}") from None
    require(
        isinstance(argv, list) and all(isinstance(a, str) for a in argv),
        "HEALTHCHECK CMD is not a list of strings",
    )
    return argv


def check_dockerfile_structure(ctx: Context) -> str:
    stages = dockerfile_stages()
    require(len(stages) >= 2, f"not multi-stage: {len(stages)} FROM")
    build, final = stages[0], stages[-1]
    require(
        re.fullmatch(r"rust:[^ ]*bookworm", build["image"]) is not None,
        f"the builder {build['image']!r} is not a Rust image on Debian bookworm",
    )
    require(build["name"], "the builder stage has no name (FROM ... AS name)")
    runs = " ".join(instructions(build, "RUN"))
    require(
        re.search(r"cargo build --release --locked -p manifold\b", runs) is not None,
        "the builder does not run `cargo build --release --locked -p manifold`",
    )
    require(not final["image"].startswith("rust:"), "the final stage is the Rust image")
    require(
        re.fullmatch(r"(debian:bookworm-slim|gcr\.io/distroless/cc[^ ]*)", final["image"]) is not None,
        f"the runtime image {final['image']!r} is neither debian:bookworm-slim nor distroless/cc",
    )
    copies = instructions(final, "COPY")
    require(
        any(f"--from={build['name']}" in c and "manifold" in c for c in copies),
        "the final stage copies no manifold binary from the builder",
    )
    uid = dockerfile_user_uid()
    require(uid != 0, "USER is root (uid 0)")
    exposed = [int(p.split("/")[0]) for e in instructions(final, "EXPOSE") for p in e.split()]
    require(8080 in exposed, f"EXPOSE {exposed}: 8080 (the listener) is not exposed")
    entry = instructions(final, "ENTRYPOINT") + instructions(final, "CMD")
    require(
        any("/etc/manifold/manifold.toml" in e for e in entry),
        "no default config path (/etc/manifold/manifold.toml) in ENTRYPOINT/CMD",
    )
    argv = dockerfile_healthcheck()
    script = " ".join(argv)
    require(
        re.search(r"/(healthz|readyz)\b", script) is not None,
        "HEALTHCHECK probes neither /healthz nor /readyz",
    )
    return f"{len(stages)} stages ({build['image']} -> {final['image']}), USER {uid}, EXPOSE {exposed}, HEALTHCHECK {argv[0]}"


def check_dockerfile_lint(ctx: Context) -> str:
    result = subprocess.run(
        [ctx.hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    require(result.returncode == 0, f"hadolint:\n{(result.stdout + result.stderr).strip()}")
    return "hadolint finds nothing"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_healthcheck(argv: list[str], port: int) -> int:
    # The image probes 127.0.0.1:8080; here Manifold listens on a free port instead.
    script = [a.replace("/dev/tcp/127.0.0.1/8080", f"/dev/tcp/127.0.0.1/{port}") for a in argv]
    result = subprocess.run(script, capture_output=True, text=True, timeout=10, check=False)
    return result.returncode


def check_dockerfile_healthcheck_runs(ctx: Context) -> str:
    argv = dockerfile_healthcheck()
    require(
        any("/dev/tcp/127.0.0.1/8080" in a for a in argv), "HEALTHCHECK does not connect to 127.0.0.1:8080"
    )
    require(
        Path(argv[0]).name in ("bash", "sh") or argv[0] == "CMD-SHELL",
        f"HEALTHCHECK runs {argv[0]!r}: only a shell is in the runtime image",
    )
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "probe.toml"
        config.write_text("[server]\n")
        log = open(Path(tmp) / "serve.log", "w+")
        proc = subprocess.Popen(
            [str(ctx.manifold), "serve", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None:
                        log.seek(0)
                        raise CheckFailed(f"manifold serve exited: {log.read()[-2000:]}") from None
                    require(time.monotonic() < deadline, "manifold serve did not listen within 15 s")
                    time.sleep(0.1)
            up = run_healthcheck(argv, port)
        finally:
            # Only this probe server, which this check started; no drain is wanted here.
            proc.kill()
            proc.wait()
            log.close()
    down = run_healthcheck(argv, port)
    require(up == 0, f"the HEALTHCHECK command failed ({up}) against a serving Manifold")
    require(down != 0, "the HEALTHCHECK command succeeded with nothing listening")
    return "the HEALTHCHECK command passes against a serving manifold and fails with none"


def dockerignore_patterns() -> list[str]:
    require(DOCKERIGNORE.exists(), ".dockerignore is missing at the repository root")
    return [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def ignored(path: str, patterns: list[str]) -> bool:
    result = False
    for p in patterns:
        negate = p.startswith("!")
        p = p.lstrip("!").rstrip("/")
        p = p[2:] if p.startswith("./") else p
        candidates = [path] + [path.rsplit("/", i)[0] for i in range(1, path.count("/") + 1)]
        if any(fnmatch.fnmatch(c, p) or fnmatch.fnmatch(c, p.replace("**/", "")) for c in candidates):
            result = not negate
    return result


def check_build_context(ctx: Context) -> str:
    patterns = dockerignore_patterns()
    for needed in [
        "target",
        ".venv",
        "tests/.cache",
        "node_modules",
        "crates/x/node_modules",
        "target/release/manifold",
    ]:
        require(ignored(needed, patterns), f".dockerignore does not keep {needed!r} out of the build context")
    build = dockerfile_stages()[0]
    sources: list[str] = []
    for copy in instructions(build, "COPY"):
        words = [w for w in copy.split() if not w.startswith("--")]
        sources += words[:-1]
    require(sources, "the builder copies nothing")
    for s in sources:
        require((ROOT / s).exists(), f"COPY {s}: no such path in the repository")
        require(not ignored(s, patterns), f"COPY {s}: .dockerignore excludes it")
    note = ""
    if ctx.cargo:
        # The builder's context is exactly these paths: the workspace (every member's manifest
        # and its path dependencies) must load from them. --no-deps: nothing is downloaded.
        with tempfile.TemporaryDirectory() as tmp:
            for s in sources:
                src, dst = ROOT / s, Path(tmp) / s
                if src.is_dir():
                    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("target", "node_modules"))
                else:
                    shutil.copy2(src, dst)
            result = subprocess.run(
                [
                    ctx.cargo,
                    "metadata",
                    "--format-version",
                    "1",
                    "--no-deps",
                    "--offline",
                    "--manifest-path",
                    str(Path(tmp) / "Cargo.toml"),
                ],
                capture_output=True,
                text=True,
                check=False,
                cwd=tmp,
            )
            require(
                result.returncode == 0,
                f"the workspace does not load from the builder's COPY set {sources}:\n{result.stderr.strip()[-2000:]}",
            )
            packages = {p["name"] for p in json.loads(result.stdout)["packages"]}
            require("manifold" in packages, "package manifold not in the workspace")
            note = "; cargo metadata loads the workspace from them alone"
    return (
        f"COPY {' '.join(sources)}; .dockerignore keeps target/, .venv, node_modules, tests/.cache out{note}"
    )


# --- Kubernetes -----------------------------------------------------------------------------


def check_kustomize(ctx: Context) -> str:
    counts = []
    for name in KUSTOMIZATIONS:
        objects = ctx.objects(name)
        require(objects, f"kustomize {name} renders nothing")
        counts.append(f"{name}: {len(objects)}")
    # The whole is exactly its parts.
    parts = sorted(
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        for name in KUSTOMIZATIONS[:-1]
        for o in ctx.objects(name)
    )
    whole = sorted(
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in ctx.objects(".")
    )
    require(parts == whole, "deploy/kubernetes/kustomization.yaml renders other objects than its folders")
    return "kubectl kustomize renders " + ", ".join(counts) + " objects"


def check_schemas(ctx: Context) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for name in KUSTOMIZATIONS[:-1]:
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(ctx.render(name))
            files.append(str(path))
        for version in KUBERNETES_VERSIONS:
            result = subprocess.run(
                [ctx.kubernetes_validate, "--strict", "--quiet", "-k", version, *files],
                capture_output=True,
                text=True,
                check=False,
            )
            output = (result.stdout + result.stderr).strip()
            require(
                result.returncode == 0 and "ERROR" not in output,
                f"Kubernetes {version} schemas (strict):\n{output}",
            )
    total = len(ctx.objects("."))
    return (
        f"{total} objects valid against the strict schemas of Kubernetes {' and '.join(KUBERNETES_VERSIONS)}"
    )


def check_namespaced(ctx: Context) -> str:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    objects = ctx.objects(".")
    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    for o in objects:
        ns = o["metadata"].get("namespace")
        if o["kind"] in cluster_scoped:
            require(ns is None, f"{o['kind']} {o['metadata']['name']} is cluster-scoped but has a namespace")
        else:
            require(
                ns in namespaces, f"{o['kind']} {o['metadata']['name']}: namespace {ns!r} is not created here"
            )
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        for s in binding.get("subjects", []):
            if s["kind"] == "ServiceAccount":
                find(
                    [o for o in objects if o["metadata"].get("namespace") == s.get("namespace")],
                    "ServiceAccount",
                    s["name"],
                )
    return (
        f"every object is in a namespace made here ({', '.join(sorted(namespaces))}); binding subjects exist"
    )


def check_pods_restricted(ctx: Context) -> str:
    """Every pod meets the essentials of the restricted Pod Security Standard, which the
    namespaces enforce, and runs with a read-only root filesystem and resource requests."""
    names = []
    for d in (o for o in ctx.objects(".") if o["kind"] == "Deployment"):
        spec = pod_spec(d)
        psc = spec.get("securityContext", {})
        who = f"Deployment {d['metadata']['name']}"
        require(psc.get("runAsNonRoot") is True, f"{who}: runAsNonRoot is not true")
        require(psc.get("runAsUser", 1) != 0, f"{who}: runAsUser 0")
        require(
            psc.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost"),
            f"{who}: no seccompProfile",
        )
        require(
            not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"),
            f"{who}: host namespaces",
        )
        for c in spec["containers"] + spec.get("initContainers", []):
            csc = c.get("securityContext", {})
            where = f"{who}, container {c['name']}"
            require(
                csc.get("allowPrivilegeEscalation") is False,
                f"{where}: allowPrivilegeEscalation is not false",
            )
            require(csc.get("readOnlyRootFilesystem") is True, f"{where}: root filesystem is not read-only")
            require(
                csc.get("capabilities", {}).get("drop") == ["ALL"],
                f"{where}: capabilities are not dropped (drop: [ALL])",
            )
            require(not csc.get("capabilities", {}).get("add"), f"{where}: adds capabilities")
            require(not csc.get("privileged"), f"{where}: privileged")
            requests = c.get("resources", {}).get("requests", {})
            require("cpu" in requests and "memory" in requests, f"{where}: no cpu and memory requests")
            require(
                ":" in c["image"] and not c["image"].endswith(":latest"),
                f"{where}: image {c['image']!r} has no fixed tag",
            )
        names.append(d["metadata"]["name"])
    return f"non-root, read-only, no privilege escalation, capabilities dropped, requests set: {', '.join(names)}"


def check_manifold_deployment(ctx: Context) -> str:
    objects = ctx.objects("manifold")
    d = manifold_deployment(ctx)
    spec = pod_spec(d)
    c = container(d, "manifold")
    config = tomllib.loads(manifold_config_text(ctx))
    server = config.get("server", {})

    require(d["spec"].get("replicas") == 3, f"replicas is {d['spec'].get('replicas')}, not 3")

    # Probes: readiness on /readyz, liveness on /healthz, both on the listener's port.
    require("listen" in server, "the config sets no server.listen")
    port = listen_port(server["listen"])
    require(
        server["listen"].startswith("0.0.0.0:") or server["listen"].startswith("[::]:"),
        f"server.listen {server['listen']!r} is not reachable from outside the pod",
    )
    ready, live = c.get("readinessProbe", {}), c.get("livenessProbe", {})
    require(
        ready.get("httpGet", {}).get("path") == "/readyz", "the readiness probe is not an HTTP GET of /readyz"
    )
    require(
        live.get("httpGet", {}).get("path") == "/healthz", "the liveness probe is not an HTTP GET of /healthz"
    )
    for probe in (ready, live):
        require(
            port_number(c, probe["httpGet"]["port"]) == port,
            f"a probe's port is not server.listen's port {port}",
        )
    require(
        port in [p["containerPort"] for p in c.get("ports", [])],
        f"container port {port} (server.listen) not declared",
    )
    require(port == 8080, f"server.listen's port {port} is not the image's EXPOSE 8080")

    # The drain fits in the grace period.
    for key in ("drain_delay", "drain_timeout"):
        require(key in server, f"the config sets no server.{key}")
    delay, timeout = duration_seconds(server["drain_delay"]), duration_seconds(server["drain_timeout"])
    grace_ms = server.get("shutdown_grace_ms", 2000)
    needed = delay + timeout + grace_ms / 1000
    grace = spec.get("terminationGracePeriodSeconds", 30)
    require(
        grace > needed,
        f"terminationGracePeriodSeconds {grace} is not more than drain_delay + drain_timeout + "
        f"shutdown_grace_ms ({needed:g} s)",
    )
    pre_stop = c.get("lifecycle", {}).get("preStop")
    if pre_stop and "sleep" in pre_stop:
        needed += pre_stop["sleep"]["seconds"]
        require(
            grace > needed,
            f"terminationGracePeriodSeconds {grace} does not cover the preStop sleep and the drain",
        )

    # The image's user, and the config where the image expects it.
    uid = dockerfile_user_uid()
    run_as = spec.get("securityContext", {}).get("runAsUser")
    require(run_as == uid, f"runAsUser {run_as} is not the image's USER {uid}")
    args = c.get("args", [])
    require("--config" in args, "the container's args give no --config")
    config_path = args[args.index("--config") + 1]
    cm = generated(objects, "ConfigMap", "manifold-config")
    mount = mount_of_volume(d, c, "configMap", cm["metadata"]["name"])
    require(
        config_path == f"{mount.rstrip('/')}/manifold.toml",
        f"--config {config_path} is not manifold.toml in the ConfigMap's mount {mount}",
    )
    require(
        config_path == "/etc/manifold/manifold.toml",
        f"--config {config_path} is not the image's default path",
    )

    # Every ${VAR} of the config is set in the container's environment.
    env = {e["name"]: e for e in c.get("env", [])}
    missing = [v for v in env_placeholders(manifold_config_text(ctx)) if v not in env]
    require(not missing, f"the config uses ${{{', '.join(missing)}}} but the container does not set them")
    for name, e in env.items():
        require(
            "value" not in e or not re.search(r"(KEY|TOKEN|URL|PASSWORD)", name),
            f"{name} is given as a literal value, not from a Secret",
        )

    # Service and PodDisruptionBudget select exactly these pods.
    labels = d["spec"]["template"]["metadata"]["labels"]
    require(
        all(labels.get(k) == v for k, v in d["spec"]["selector"]["matchLabels"].items()),
        "the Deployment's selector does not match its pods",
    )
    service = find(objects, "Service", "manifold")
    require(
        all(labels.get(k) == v for k, v in service["spec"]["selector"].items()),
        "the Service's selector does not match the pods",
    )
    for p in service["spec"]["ports"]:
        require(
            port_number(c, p["targetPort"]) == port,
            f"the Service's targetPort {p['targetPort']} is not the listener",
        )
    pdb = find(objects, "PodDisruptionBudget", "manifold")
    require(
        all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items()),
        "the PDB's selector does not match the pods",
    )
    replicas = d["spec"]["replicas"]
    if "maxUnavailable" in pdb["spec"]:
        allowed = int(pdb["spec"]["maxUnavailable"])
    else:
        allowed = replicas - int(pdb["spec"]["minAvailable"])
    require(
        1 <= allowed < replicas,
        f"the PDB lets {allowed} of {replicas} replicas go at once (wanted 1 to {replicas - 1})",
    )

    # Prometheus annotations point at /metrics on the listener (no server.admin in this config).
    annotations = d["spec"]["template"]["metadata"].get("annotations", {})
    require(
        annotations.get("prometheus.io/scrape") == "true",
        'the pods are not annotated prometheus.io/scrape: "true"',
    )
    metrics_port = int(annotations.get("prometheus.io/port", "0"))
    expected = listen_port(server["admin"]) if "admin" in server else port
    require(
        metrics_port == expected,
        f"prometheus.io/port {metrics_port} is not where /metrics is served ({expected})",
    )
    require(
        metrics_port in [p["containerPort"] for p in c.get("ports", [])],
        f"prometheus.io/port {metrics_port} is not a declared container port",
    )
    require(annotations.get("prometheus.io/path") == "/metrics", "prometheus.io/path is not /metrics")
    return (
        f"3 replicas, /readyz and /healthz on {port}, grace {grace}s > {needed:g}s drain, uid {uid}, "
        f"config at {config_path}, {len(env)} env vars cover the config, Service/PDB/annotations agree"
    )


def documented_secrets() -> str:
    require(README.exists(), "deploy/README.md is missing")
    return README.read_text()


def check_secrets_documented(ctx: Context) -> str:
    """Secrets are made by hand: deploy/README.md must show how to make each one the pods read,
    with each key they read from it."""
    readme = documented_secrets()
    wanted: set[tuple[str, str]] = set()
    for d in (o for o in ctx.objects(".") if o["kind"] == "Deployment"):
        for c in pod_spec(d)["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    wanted.add((ref["name"], ref["key"]))
        for v in pod_spec(d).get("volumes", []):
            if "secret" in v:
                wanted.add((v["secret"]["secretName"], ""))
                for item in v["secret"].get("items", []):
                    wanted.add((v["secret"]["secretName"], item["key"]))
    missing = []
    for secret, key in sorted(wanted):
        if f"create secret generic {secret}" not in readme:
            missing.append(secret)
        elif key and f"--from-literal={key}=" not in readme:
            missing.append(f"{secret}/{key}")
    require(not missing, f"deploy/README.md does not show how to create: {', '.join(missing)}")
    secrets = sorted({s for s, _ in wanted})
    return f"deploy/README.md creates {', '.join(secrets)} with every key the pods read"


def check_manifold_config(ctx: Context) -> str:
    text = manifold_config_text(ctx)
    require(
        text == (K8S / "manifold" / "manifold.toml").read_text(),
        "the ConfigMap does not hold manifold.toml as is",
    )
    config = tomllib.loads(text)
    require(config.get("sessions", {}).get("store") == "redis", '[sessions] store is not "redis"')
    require(config.get("cache", {}).get("backend") == "redis", '[cache] backend is not "redis"')
    require(config.get("limits", {}).get("backend") == "redis", '[limits] backend is not "redis"')
    upstreams = config.get("upstreams", {})
    require(upstreams, "no upstreams")
    for name, u in upstreams.items():
        require(
            "url" in u and "command" not in u,
            f"upstreams.{name} is not an HTTP upstream (the image holds no other program to run)",
        )
    teams = config.get("teams", {})
    require(
        any(t.get("api_keys") for t in teams.values()) or "auth" in config,
        "hosts need no credentials: a listener on all interfaces needs [teams] API keys or [auth]",
    )
    # Placeholder values for every ${VAR}: long enough for keys and tokens, a URL for Redis.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MANIFOLD_")}
    for var in env_placeholders(text):
        env[var] = (
            "redis://127.0.0.1:6379/0"
            if var.endswith("REDIS_URL")
            else f"{var.lower()}-placeholder-0123456789abcdef"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifold.toml"
        path.write_text(text)
        result = subprocess.run(
            [str(ctx.manifold), "check", "--no-start", "--config", str(path)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=60,
        )
        if result.returncode != 0:
            raise CheckFailed(f"manifold check --no-start:\n{(result.stdout + result.stderr).strip()}")
    return f"manifold check --no-start accepts the ConfigMap's config ({len(upstreams)} HTTP upstreams, Redis sessions, cache and limits)"


# --- Prometheus ------------------------------------------------------------------------------


def expand(match: re.Match, replacement: str) -> str:
    """A relabel replacement with $1 / ${1} filled from the regex's groups."""
    return re.sub(
        r"\$(\d+)|\$\{(\d+)\}", lambda g: match.group(int(g.group(1) or g.group(2))) or "", replacement
    )


def relabel(labels: dict[str, str], rules: list[dict]) -> dict[str, str] | None:
    """Prometheus' relabelling, for the actions the scrape config uses."""
    for r in rules:
        action = r.get("action", "replace")
        source = r.get("separator", ";").join(labels.get(s, "") for s in r.get("source_labels", []))
        regex = re.compile(r.get("regex", "(.*)"))
        m = regex.fullmatch(source)
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "keepequal" and source != labels.get(r["target_label"], ""):
            return None
        if action == "dropequal" and source == labels.get(r["target_label"], ""):
            return None
        if action == "replace" and m:
            value = expand(m, r.get("replacement", "$1"))
            target = r["target_label"]
            if value:
                labels[target] = value
            else:
                labels.pop(target, None)
        if action not in ("keep", "drop", "keepequal", "dropequal", "replace"):
            raise CheckFailed(f"relabel action {action!r} is not simulated here")
    return labels


def pod_targets(pod: dict, namespace: str, phase: str = "Running") -> list[dict[str, str]]:
    """The targets Prometheus' role: pod discovery makes of a pod: one per declared container
    port (and one without a port for containers that declare none)."""
    meta = pod["metadata"]
    base = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": "manifold-0",
        "__meta_kubernetes_pod_ip": "10.0.0.7",
        "__meta_kubernetes_pod_phase": phase,
        "__meta_kubernetes_pod_ready": "true",
        "__meta_kubernetes_pod_node_name": "node-a",
    }

    def clean(name: str) -> str:
        return re.sub(r"[^a-zA-Z0-9_]", "_", name)

    for k, v in meta.get("labels", {}).items():
        base[f"__meta_kubernetes_pod_label_{clean(k)}"] = v
        base[f"__meta_kubernetes_pod_labelpresent_{clean(k)}"] = "true"
    for k, v in meta.get("annotations", {}).items():
        base[f"__meta_kubernetes_pod_annotation_{clean(k)}"] = v
        base[f"__meta_kubernetes_pod_annotationpresent_{clean(k)}"] = "true"
    targets = []
    for c in pod["spec"]["containers"]:
        for p in c.get("ports", []) or [None]:
            t = dict(base, __meta_kubernetes_pod_container_name=c["name"])
            if p:
                t["__address__"] = f"10.0.0.7:{p['containerPort']}"
                t["__meta_kubernetes_pod_container_port_number"] = str(p["containerPort"])
                t["__meta_kubernetes_pod_container_port_name"] = p.get("name", "")
            else:
                t["__address__"] = "10.0.0.7"
            targets.append(t)
    return targets


def check_prometheus_config(ctx: Context) -> str:
    config = yaml.safe_load(PROMETHEUS_YML.read_text())
    cm = generated(ctx.objects("monitoring"), "ConfigMap", "prometheus-config")
    require(
        cm["data"].get("prometheus.yml") == PROMETHEUS_YML.read_text(),
        "ConfigMap prometheus-config does not hold prometheus.yml as is",
    )
    jobs = {j["job_name"]: j for j in config.get("scrape_configs", [])}
    require("manifold" in jobs, "no scrape job `manifold`")
    job = jobs["manifold"]
    sd = job.get("kubernetes_sd_configs")
    require(sd, "the manifold job does not use kubernetes_sd_configs")

    # Debian's promtool is built without Kubernetes discovery: it checks a copy in which each
    # kubernetes_sd_configs becomes static_configs (and the token file is a placeholder), and
    # the discovery blocks are checked below.
    with tempfile.TemporaryDirectory() as tmp:
        copy = json.loads(json.dumps(config))
        token = Path(tmp) / "token"
        token.write_text("placeholder\n")
        for j in copy["scrape_configs"]:
            if j.pop("kubernetes_sd_configs", None) is not None:
                j["static_configs"] = [{"targets": ["127.0.0.1:8080"]}]
            auth = j.get("authorization", {})
            if "credentials_file" in auth:
                auth["credentials_file"] = str(token)
        path = Path(tmp) / "prometheus.yml"
        path.write_text(yaml.safe_dump(copy, sort_keys=False))
        result = subprocess.run(
            [ctx.promtool, "check", "config", str(path)], capture_output=True, text=True, check=False
        )
        require(result.returncode == 0, f"promtool check config:\n{(result.stdout + result.stderr).strip()}")

    d = manifold_deployment(ctx)
    namespace = d["metadata"]["namespace"]
    for entry in sd:
        unknown = set(entry) - KUBERNETES_SD_KEYS
        require(not unknown, f"kubernetes_sd_configs: unknown keys {sorted(unknown)}")
        require(
            entry.get("role") in KUBERNETES_SD_ROLES, f"kubernetes_sd_configs: role {entry.get('role')!r}"
        )
        require(entry["role"] == "pod", "the manifold job does not discover pods (role: pod)")
        names = entry.get("namespaces", {}).get("names", [])
        require(
            namespace in names,
            f"kubernetes_sd_configs looks in {names}, not in Manifold's namespace {namespace!r}",
        )
        for s in entry.get("selectors", []):
            require(
                set(s) <= {"role", "label", "field"} and s.get("role") in KUBERNETES_SD_ROLES,
                f"bad selector {s}",
            )
            for term in filter(None, s.get("label", "").split(",")):
                k, _, v = term.partition("=")
                labels = d["spec"]["template"]["metadata"]["labels"]
                require(
                    labels.get(k.strip()) == v.strip(),
                    f"selector label {term!r} does not select Manifold's pods",
                )
    for r in job.get("relabel_configs", []):
        for label in r.get("source_labels", []) + ([r["target_label"]] if "target_label" in r else []):
            if label.startswith("__meta_kubernetes_"):
                require(
                    label in POD_META_LABELS or label.startswith(POD_META_FAMILIES),
                    f"relabel: {label} is not a label of role pod",
                )

    # What the job makes of Manifold's pod: exactly one target, /metrics on the listener.
    template = d["spec"]["template"]
    targets = [relabel(dict(t), job.get("relabel_configs", [])) for t in pod_targets(template, namespace)]
    kept = [t for t in targets if t is not None]
    require(len(kept) == 1, f"the manifold job makes {len(kept)} targets of a Manifold pod, not one")
    target = kept[0]
    annotations = template["metadata"]["annotations"]
    require(
        target["__address__"].endswith(f":{annotations['prometheus.io/port']}"),
        f"the target is {target['__address__']}",
    )
    require(
        target.get("__metrics_path__", job.get("metrics_path", "/metrics")) == "/metrics",
        "the target's path is not /metrics",
    )
    pending = [
        relabel(dict(t), job.get("relabel_configs", [])) for t in pod_targets(template, namespace, "Pending")
    ]
    require(all(t is None for t in pending), "a pending pod would be scraped")
    other = dict(template, metadata=dict(template["metadata"], annotations={}))
    require(
        all(relabel(dict(t), job.get("relabel_configs", [])) is None for t in pod_targets(other, namespace)),
        "a pod without prometheus.io/scrape would be scraped",
    )

    # The token file is the mounted Secret.
    prometheus = find(ctx.objects("monitoring"), "Deployment", "prometheus")
    pc = container(prometheus, "prometheus")
    creds = job.get("authorization", {}).get("credentials_file")
    require(creds, "the manifold job sends no bearer token (server.metrics_token)")
    secret_mount = mount_of_volume(prometheus, pc, "secret", "manifold-metrics")
    require(
        str(Path(creds).parent) == secret_mount.rstrip("/"),
        f"credentials_file {creds} is not in the Secret's mount {secret_mount}",
    )
    require(
        f"--from-literal={Path(creds).name}=" in documented_secrets(),
        f"deploy/README.md does not create the Secret manifold-metrics with the key {Path(creds).name!r}",
    )
    config_arg = next(
        (a.split("=", 1)[1] for a in pc.get("args", []) if a.startswith("--config.file=")), None
    )
    mount = mount_of_volume(prometheus, pc, "configMap", cm["metadata"]["name"])
    require(
        config_arg == f"{mount.rstrip('/')}/prometheus.yml",
        f"--config.file {config_arg} is not prometheus.yml in {mount}",
    )

    return (
        f"promtool accepts it; role pod in {namespace!r} keeps exactly {target['__address__']}{target.get('__metrics_path__', '/metrics')} "
        f"of a Manifold pod with the token from {secret_mount}"
    )


# --- Grafana ---------------------------------------------------------------------------------


def check_grafana(ctx: Context) -> str:
    objects = ctx.objects("monitoring")
    grafana = find(objects, "Deployment", "grafana")
    gc = container(grafana, "grafana")

    # The dashboard: the ConfigMap is made from dashboards/manifold.json itself.
    dashboard_cm = generated(objects, "ConfigMap", "grafana-dashboard-manifold")
    data = dashboard_cm.get("data", {})
    require(list(data) == ["manifold.json"], f"the dashboard ConfigMap holds {list(data)}")
    require(
        data["manifold.json"] == DASHBOARD.read_text(),
        "the dashboard ConfigMap differs from dashboards/manifold.json",
    )
    dashboard = json.loads(data["manifold.json"])
    size = len(json.dumps(dashboard_cm).encode())
    require(
        size < 262144,
        f"the dashboard ConfigMap is {size} bytes: too large for client-side kubectl apply's annotation",
    )

    # The data source: the uid the dashboard defaults to, at the in-cluster Prometheus.
    ds_cm = generated(objects, "ConfigMap", "grafana-datasources")
    require(
        list(ds_cm["data"].values()) == [DATASOURCE.read_text()],
        "ConfigMap grafana-datasources does not hold grafana-datasource.yaml as is",
    )
    ds_doc = yaml.safe_load(DATASOURCE.read_text())
    require(ds_doc.get("apiVersion") == 1, "the data source file is not apiVersion 1")
    sources = [s for s in ds_doc.get("datasources", []) if s.get("type") == "prometheus"]
    require(len(sources) == 1, "expected one Prometheus data source")
    source = sources[0]
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    require("datasource" in variables, "the dashboard has no datasource variable")
    default = variables["datasource"].get("current", {}).get("value")
    require(
        source.get("uid") == default,
        f"data source uid {source.get('uid')!r} is not the dashboard's default {default!r}",
    )
    url = urllib.parse.urlparse(source["url"])
    prom_service = find(objects, "Service", "prometheus")
    require(
        url.hostname
        in (
            f"prometheus.{prom_service['metadata']['namespace']}.svc.cluster.local",
            f"prometheus.{prom_service['metadata']['namespace']}.svc",
        ),
        f"the data source url {source['url']} is not the Prometheus Service",
    )
    require(
        url.port in [p["port"] for p in prom_service["spec"]["ports"]],
        f"the data source port {url.port} is not the Service's",
    )
    scrape = yaml.safe_load(PROMETHEUS_YML.read_text())["global"]["scrape_interval"]
    require(
        source.get("jsonData", {}).get("timeInterval") == scrape,
        f"timeInterval {source.get('jsonData', {}).get('timeInterval')} is not the scrape interval {scrape}",
    )

    # The provider: dashboards/provisioning/dashboards/manifold.yaml, reading where the dashboard is mounted.
    provider_cm = generated(objects, "ConfigMap", "grafana-dashboard-provider")
    require(
        list(provider_cm["data"].values()) == [PROVIDER.read_text()],
        "the provider ConfigMap differs from its file in dashboards/",
    )
    provider_doc = yaml.safe_load(PROVIDER.read_text())
    require(provider_doc.get("apiVersion") == 1, "the provider file is not apiVersion 1")
    providers = provider_doc.get("providers", [])
    require(len(providers) == 1 and providers[0].get("type") == "file", "expected one file provider")
    dashboard_mount = mount_of_volume(grafana, gc, "configMap", dashboard_cm["metadata"]["name"])
    require(
        providers[0]["options"]["path"].rstrip("/") == dashboard_mount.rstrip("/"),
        f"the provider reads {providers[0]['options']['path']}, the dashboard is mounted at {dashboard_mount}",
    )
    provisioning = "/etc/grafana/provisioning"
    require(
        mount_of_volume(grafana, gc, "configMap", ds_cm["metadata"]["name"]) == f"{provisioning}/datasources",
        "the data sources are not mounted in provisioning/datasources",
    )
    require(
        mount_of_volume(grafana, gc, "configMap", provider_cm["metadata"]["name"])
        == f"{provisioning}/dashboards",
        "the provider is not mounted in provisioning/dashboards",
    )

    # The provisioning files in dashboards/ for a Grafana outside Kubernetes parse as well.
    local = yaml.safe_load((ROOT / "dashboards/provisioning/datasources/prometheus.yaml").read_text())
    require(
        local.get("apiVersion") == 1 and local.get("datasources"),
        "dashboards/provisioning/datasources/prometheus.yaml",
    )
    return (
        f"the dashboard ConfigMap equals dashboards/manifold.json ({len(data['manifold.json'])} bytes); data source uid "
        f"{source['uid']!r} at {source['url']}; provider reads {dashboard_mount}"
    )


# --------------------------------------------------------------------------------------------

CHECKS = [
    ("Dockerfile: multi-stage, non-root, EXPOSE, HEALTHCHECK, default config", check_dockerfile_structure),
    ("Dockerfile: hadolint", check_dockerfile_lint),
    ("Dockerfile: the HEALTHCHECK command works", check_dockerfile_healthcheck_runs),
    ("Dockerfile: build context", check_build_context),
    ("Kubernetes: kustomize renders", check_kustomize),
    ("Kubernetes: JSON schemas", check_schemas),
    ("Kubernetes: namespaces and bindings", check_namespaced),
    ("Kubernetes: pod security", check_pods_restricted),
    ("Kubernetes: Manifold's Deployment, Service, PDB", check_manifold_deployment),
    ("Kubernetes: Secrets documented", check_secrets_documented),
    ("Manifold: the ConfigMap's config", check_manifold_config),
    ("Prometheus: scrape config", check_prometheus_config),
    ("Grafana: provisioning", check_grafana),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifold", required=True)
    parser.add_argument("--promtool", required=True)
    parser.add_argument("--kubectl", required=True)
    parser.add_argument("--hadolint", required=True)
    parser.add_argument("--kubernetes-validate", required=True)
    parser.add_argument("--only", help="run only the checks whose title starts with this")
    args = parser.parse_args()
    ctx = Context(args)
    passed = failed = 0
    for title, check in CHECKS:
        if args.only and not title.startswith(args.only):
            continue
        try:
            detail = check(ctx)
        except CheckFailed as e:
            failed += 1
            print(f"FAIL: {title}: {e}")
        except Exception:  # a bug or a malformed file: report it as this check's failure
            failed += 1
            print(f"FAIL: {title}: unexpected error\n{traceback.format_exc()}")
        else:
            passed += 1
            print(f"ok: {title}: {detail}")
        sys.stdout.flush()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
