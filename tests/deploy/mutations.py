"""Checks of the checks: each case breaks one thing in a copy of the deployment kit and runs
the check that guards it (check_deploy.py --only), which must fail. A check that passes on
broken input is reported here, so no check can quietly stop checking.

Run by tests/deploy/check.sh after check_deploy.py, with the same tool arguments.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).resolve().parent / "check_deploy.py"
sys.path.insert(0, str(CHECKER.parent))
from check_deploy import CHECKS  # noqa: E402  (the titles the cases name)

# (what is broken, file, regex, replacement, the check that must fail).
# Each regex must match exactly once in its file (with re.M | re.S).
MUTATIONS = [
    (
        "single-stage image (no builder)",
        "deploy/Dockerfile",
        r"^# --- build -+\n.*?^# --- runtime -+\n",
        "",
        "Dockerfile: multi-stage",
    ),
    (
        "the image runs as root",
        "deploy/Dockerfile",
        r"^USER 10001:10001$",
        "USER 0",
        "Dockerfile: multi-stage",
    ),
    ("no USER in the image", "deploy/Dockerfile", r"^USER 10001:10001\n", "", "Dockerfile: multi-stage"),
    ("no HEALTHCHECK", "deploy/Dockerfile", r"^HEALTHCHECK .*?\]\n", "", "Dockerfile: multi-stage"),
    (
        "the listener's port not exposed",
        "deploy/Dockerfile",
        r"^EXPOSE 8080$",
        "EXPOSE 9090",
        "Dockerfile: multi-stage",
    ),
    (
        "a HEALTHCHECK that never passes",
        "deploy/Dockerfile",
        r"= 200 \]",
        "= 201 ]",
        "Dockerfile: the HEALTHCHECK command works",
    ),
    (
        "an unpinned apt-get install",
        "deploy/Dockerfile",
        r"^(COPY --from=build .*)$",
        r"RUN apt-get update && apt-get install -y curl\n\1",
        "Dockerfile: hadolint",
    ),
    (
        "target/ in the build context",
        ".dockerignore",
        r"^target/\n\*\*/target/\n",
        "",
        "Dockerfile: build context",
    ),
    (
        "the builder copies one crate only",
        "deploy/Dockerfile",
        r"^COPY crates \./crates$",
        "COPY crates/manifold ./crates/manifold",
        "Dockerfile: build context",
    ),
    (
        "a kustomization names a missing file",
        "deploy/kubernetes/manifold/kustomization.yaml",
        r"^  - service\.yaml$",
        "  - services.yaml",
        "Kubernetes: kustomize renders",
    ),
    (
        "a misspelt field",
        "deploy/kubernetes/manifold/deployment.yaml",
        r"readOnlyRootFilesystem: true\n            capabilities",
        "readOnlyRootFilesytem: true\n            capabilities",
        "Kubernetes: JSON schemas",
    ),
    (
        "a string where an integer goes",
        "deploy/kubernetes/manifold/deployment.yaml",
        r"^  replicas: 3$",
        '  replicas: "3"',
        "Kubernetes: JSON schemas",
    ),
    (
        "Redis in a namespace nothing creates",
        "deploy/kubernetes/redis/kustomization.yaml",
        r"^namespace: manifold$",
        "namespace: cache",
        "Kubernetes: namespaces",
    ),
    (
        "a writable root filesystem",
        "deploy/kubernetes/manifold/deployment.yaml",
        r"readOnlyRootFilesystem: true",
        "readOnlyRootFilesystem: false",
        "Kubernetes: pod security",
    ),
    (
        "Redis runs as root",
        "deploy/kubernetes/redis/redis.yaml",
        r"runAsNonRoot: true\n        runAsUser: 999 ",
        "runAsNonRoot: false\n        runAsUser: 0 ",
        "Kubernetes: pod security",
    ),
    (
        "two replicas",
        "deploy/kubernetes/manifold/deployment.yaml",
        r"^  replicas: 3$",
        "  replicas: 2",
        "Kubernetes: Manifold's",
    ),
    (
        "a grace period shorter than the drain",
        "deploy/kubernetes/manifold/deployment.yaml",
        r"terminationGracePeriodSeconds: 45",
        "terminationGracePeriodSeconds: 30",
        "Kubernetes: Manifold's",
    ),
    (
        "a drain longer than the grace period",
        "deploy/kubernetes/manifold/manifold.toml",
        r'^drain_timeout = "30s"$',
        'drain_timeout = "60s"',
        "Kubernetes: Manifold's",
    ),
    (
        "readiness on /healthz",
        "deploy/kubernetes/manifold/deployment.yaml",
        r"path: /readyz",
        "path: /healthz",
        "Kubernetes: Manifold's",
    ),
    (
        "liveness on /readyz",
        "deploy/kubernetes/manifold/deployment.yaml",
        r"(livenessProbe:\n            httpGet:\n              path: )/healthz",
        r"\1/readyz",
        "Kubernetes: Manifold's",
    ),
    (
        "a config variable the pod does not set",
        "deploy/kubernetes/manifold/deployment.yaml",
        r"^            - name: MANIFOLD_SEARCH_TOKEN\n.*?key: search-token\n",
        "",
        "Kubernetes: Manifold's",
    ),
    (
        "the Service aims at another port",
        "deploy/kubernetes/manifold/service.yaml",
        r"targetPort: http",
        "targetPort: 9090",
        "Kubernetes: Manifold's",
    ),
    (
        "a PDB that lets every replica go",
        "deploy/kubernetes/manifold/poddisruptionbudget.yaml",
        r"maxUnavailable: 1",
        "maxUnavailable: 3",
        "Kubernetes: Manifold's",
    ),
    (
        "the config mounted where the image does not look",
        "deploy/kubernetes/manifold/deployment.yaml",
        r"mountPath: /etc/manifold\n",
        "mountPath: /etc/manifold.d\n",
        "Kubernetes: Manifold's",
    ),
    (
        "a Secret key nobody is told to create",
        "deploy/README.md",
        r"--from-literal=search-token=",
        "--from-literal=search_token=",
        "Kubernetes: Secrets documented",
    ),
    (
        "sessions kept in memory",
        "deploy/kubernetes/manifold/manifold.toml",
        r'^store = "redis"$',
        'store = "memory"',
        "Manifold: the ConfigMap's config",
    ),
    (
        "an unknown config key",
        "deploy/kubernetes/manifold/manifold.toml",
        r"^http_workers = 2 ",
        "http_worker = 2 ",
        "Manifold: the ConfigMap's config",
    ),
    (
        "a request_state_key shorter than 32 bytes",
        "deploy/kubernetes/manifold/manifold.toml",
        r'^request_state_key = "\$\{MANIFOLD_STATE_KEY\}"$',
        'request_state_key = "too-short"',
        "Manifold: the ConfigMap's config",
    ),
    (
        "a stdio upstream the image cannot run",
        "deploy/kubernetes/manifold/manifold.toml",
        r'^\[upstreams\.search\]\nurl = "https://mcp\.example\.com/mcp"$',
        '[upstreams.search]\ncommand = "npx"',
        "Manifold: the ConfigMap's config",
    ),
    (
        "an unknown relabel action",
        "deploy/kubernetes/monitoring/prometheus.yml",
        r"action: keepequal",
        "action: keepequall",
        "Prometheus: scrape config",
    ),
    (
        "a scrape interval that is no duration",
        "deploy/kubernetes/monitoring/prometheus.yml",
        r"^  scrape_interval: 15s ",
        "  scrape_interval: 15x ",
        "Prometheus: scrape config",
    ),
    (
        "a misspelt annotation label",
        "deploy/kubernetes/monitoring/prometheus.yml",
        r"source_labels: \[__meta_kubernetes_pod_annotation_prometheus_io_scrape\]",
        "source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrap]",
        "Prometheus: scrape config",
    ),
    (
        "discovery in the wrong namespace",
        "deploy/kubernetes/monitoring/prometheus.yml",
        r"names: \[manifold\]",
        "names: [default]",
        "Prometheus: scrape config",
    ),
    (
        "a discovery role that does not exist",
        "deploy/kubernetes/monitoring/prometheus.yml",
        r"^      - role: pod$",
        "      - role: pods",
        "Prometheus: scrape config",
    ),
    (
        "an unknown kubernetes_sd key",
        "deploy/kubernetes/monitoring/prometheus.yml",
        r"^        namespaces:$",
        "        namespace:",
        "Prometheus: scrape config",
    ),
    (
        "a scrape without the metrics token",
        "deploy/kubernetes/monitoring/prometheus.yml",
        r"^    authorization:\n.*?credentials_file: [^\n]*\n",
        "",
        "Prometheus: scrape config",
    ),
    (
        "the pod annotation names no declared port",
        "deploy/kubernetes/manifold/deployment.yaml",
        r'prometheus\.io/port: "8080"',
        'prometheus.io/port: "9464"',
        "Kubernetes: Manifold's",
    ),
    (
        "a data source uid the dashboard does not use",
        "deploy/kubernetes/monitoring/grafana-datasource.yaml",
        r"^    uid: prometheus$",
        "    uid: prom",
        "Grafana: provisioning",
    ),
    (
        "the dashboard mounted where the provider does not read",
        "deploy/kubernetes/monitoring/grafana.yaml",
        r"mountPath: /var/lib/grafana/dashboards/manifold",
        "mountPath: /var/lib/grafana/dashboards",
        "Grafana: provisioning",
    ),
    (
        "the dashboard ConfigMap made from another file",
        "dashboards/kustomization.yaml",
        r"^      - manifold\.json$",
        "      - manifold.json=provisioning/dashboards/manifold.yaml",
        "Grafana: provisioning",
    ),
]
# What a case copies (and may break); the rest of the repository is linked read-only.
COPIED = ["deploy", "dashboards", ".dockerignore"]
LINKED = ["Cargo.toml", "Cargo.lock", "crates"]


def main() -> int:
    tool_args = sys.argv[1:]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as base:
        for i, (what, path, pattern, replacement, check) in enumerate(MUTATIONS):
            root = Path(base) / str(i)
            root.mkdir()
            for name in COPIED:
                src = ROOT / name
                (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
            for name in LINKED:
                (root / name).symlink_to(ROOT / name)
            target = root / path
            text = target.read_text()
            broken, count = re.subn(pattern, replacement, text, flags=re.M | re.S)
            if count != 1:
                failed += 1
                print(f"FAIL: {what}: the pattern matches {path} {count} times, not once (update the case)")
                continue
            target.write_text(broken)
            result = subprocess.run(
                [sys.executable, str(CHECKER), *tool_args, "--only", check],
                capture_output=True,
                text=True,
                check=False,
                env=dict(os.environ, DEPLOY_CHECK_ROOT=str(root)),
            )
            title = next(t for t, _ in CHECKS if t.startswith(check))
            head = f"FAIL: {title}: "
            out = result.stdout
            if result.returncode != 0 and head in out:
                passed += 1
                said = out[out.index(head) + len(head) :].splitlines()
                said = [
                    ln.strip()
                    for ln in said
                    if ln.strip() and not re.fullmatch(r"\d+ passed, \d+ failed", ln)
                ]
                reason = " / ".join(said[:3])
                print(f"ok: {what} ({path}): caught by the check {title!r}: {reason[:200]}")
            else:
                failed += 1
                print(f"FAIL: {what} ({path}): {check!r} did not fail\n{result.stdout}{result.stderr}")
            sys.stdout.flush()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
