#!/usr/bin/env python3
"""A DEMO CLUSTER for the tagpin quickstart: a read-only, plain-HTTP stand-in for the
Kubernetes API. It is not Kubernetes and runs nothing.

`tagpin promote` and `tagpin verify` prove a rollout by reading the cluster: the Deployment's
template and rollout status, and each pod's `status.containerStatuses[].imageID` (the digest
the node really pulled). The quickstart has no cluster to read, so this script answers those
reads from a JSON state file, as a cluster would after Argo CD (or Flux) applied the stage's
manifests. With a real cluster, point the stage's `cluster:` in tagpin.yaml at your kubeconfig
context instead; nothing else changes.

    python3 examples/demo-cluster.py --state STATE.json --url-file URL [--port N] [--log FILE]

It binds 127.0.0.1 (a free port unless --port), then writes its URL (http://127.0.0.1:PORT)
to --url-file. The state file is read again whenever it changes (replace it atomically:
write a temp file, then mv), so a rollout can move on while the server runs:

    {
      "cluster": "staging",
      "deployments": [
        {
          "namespace": "sample-staging",
          "name": "web",
          "replicas": 2,
          "containers": {"web": "127.0.0.1:5000/sample/web:1.0@sha256:<new>"},
          "pods": [
            {"web": "127.0.0.1:5000/sample/web:1.0@sha256:<old>"},
            {"web": "127.0.0.1:5000/sample/web:1.0@sha256:<new>"}
          ]
        }
      ]
    }

`containers` is the Deployment's pod template as applied (container name -> image). Each entry
of `pods` is one running, ready pod and the image each of its containers was started from; its
imageID is that image's repository@digest, so every image here must carry a digest. A pod whose
images equal the template's counts as updated. The Deployment's status follows from that: the
controller has observed the current generation, `replicas` is the number of pods,
`updatedReplicas` those on the template, and all of them are ready and available. The generation
goes up each time a Deployment's template or replicas change in the file.

What it answers (the requests tagpin's verifier sends, and a little more):
- GET lists of Deployments and Pods, per namespace or in all namespaces, with `limit` and
  `continue` paging, as DeploymentList / PodList with `metadata.resourceVersion`; and single
  objects by name (404 NotFound Status when absent);
- GET lists of the other built-in workload kinds (StatefulSets, DaemonSets, ReplicaSets, Jobs,
  CronJobs): empty lists, as on a cluster that runs none;
- any other resource, such as Argo CD Applications or Flux Kustomizations: a 404 NotFound
  Status, as on a cluster without those CRDs installed;
- watches (`?watch=true`): 405 MethodNotAllowed; tagpin then polls;
- label and field selectors: 400 BadRequest (tagpin lists without them);
- anything but GET: 405 MethodNotAllowed: this cluster is read-only, and so is tagpin;
- GET /version, /healthz, /readyz.
Every request is logged, one line each, to --log (default: stderr).

Python 3 standard library only.
"""

import argparse
import base64
import hashlib
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# The built-in namespaced workload kinds tagpin may list, besides Deployments and Pods, with
# the kind of their list: (group/version path prefix, plural) -> (apiVersion, list kind).
EMPTY_KINDS = {
    ("/apis/apps/v1", "statefulsets"): ("apps/v1", "StatefulSetList"),
    ("/apis/apps/v1", "daemonsets"): ("apps/v1", "DaemonSetList"),
    ("/apis/apps/v1", "replicasets"): ("apps/v1", "ReplicaSetList"),
    ("/apis/batch/v1", "jobs"): ("batch/v1", "JobList"),
    ("/apis/batch/v1", "cronjobs"): ("batch/v1", "CronJobList"),
}
SERVED = {
    ("/apis/apps/v1", "deployments"): ("apps/v1", "DeploymentList", "deployments"),
    ("/api/v1", "pods"): ("v1", "PodList", "pods"),
}


class StateError(Exception):
    """The state file cannot be read or does not describe a cluster."""


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def split_image(image, where):
    """'host/repo:tag@sha256:...' -> ('host/repo', 'sha256:...')."""
    if "@" not in image:
        raise StateError(f"{where}: {image!r} has no @digest; the demo cluster derives imageID from it")
    name, digest = image.rsplit("@", 1)
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return name, digest


def short_hash(value, length=10):
    text = json.dumps(value, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


class Cluster:
    """The objects served, rebuilt from the state file whenever it changes."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        self.stamp = None  # (inode, mtime_ns, size) of the file last read
        self.spec = None  # the file's content, parsed
        self.version = 1000  # the resourceVersion: goes up with every change of the file
        self.generations = {}  # (namespace, name) -> (generation, template and replicas)
        self.created = now_rfc3339()
        self.objects = {"deployments": [], "pods": []}

    def current(self):
        """(resourceVersion, objects), reading the file again if it changed."""
        with self.lock:
            try:
                stat = os.stat(self.path)
            except OSError as e:
                raise StateError(f"cannot read the state file {self.path}: {e}") from e
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if stamp != self.stamp:
                try:
                    with open(self.path, encoding="utf-8") as f:
                        spec = json.load(f)
                except (OSError, ValueError) as e:
                    raise StateError(f"cannot read the state file {self.path}: {e}") from e
                if spec != self.spec:
                    self.version += 1
                    self.objects = self.build(spec)
                    self.spec = spec
                self.stamp = stamp
            return str(self.version), self.objects

    def build(self, spec):
        deployments, pods = [], []
        for i, d in enumerate(spec.get("deployments", [])):
            where = f"deployments[{i}]"
            try:
                namespace, name = d["namespace"], d["name"]
                replicas = int(d.get("replicas", 1))
                containers = dict(d["containers"])
                running = [dict(p) for p in d.get("pods", [])]
            except (KeyError, TypeError, ValueError) as e:
                raise StateError(f"{where}: {e!r}") from e
            key = (namespace, name)
            template = {"containers": containers, "replicas": replicas}
            generation, seen = self.generations.get(key, (0, None))
            if seen != template:
                generation += 1
                self.generations[key] = (generation, template)
            labels = {"app.kubernetes.io/name": name}
            updated = sum(1 for p in running if p == containers)
            complete = updated == replicas == len(running)
            deployments.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": self.metadata(namespace, name, labels, generation=generation),
                    "spec": {
                        "replicas": replicas,
                        "selector": {"matchLabels": labels},
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": {
                                "containers": [
                                    {"name": c, "image": image} for c, image in containers.items()
                                ]
                            },
                        },
                        "strategy": {
                            "type": "RollingUpdate",
                            "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
                        },
                    },
                    "status": {
                        "observedGeneration": generation,
                        "replicas": len(running),
                        "updatedReplicas": updated,
                        "readyReplicas": len(running),
                        "availableReplicas": len(running),
                        "conditions": [
                            {
                                "type": "Available",
                                "status": "True",
                                "reason": "MinimumReplicasAvailable",
                                "message": "Deployment has minimum availability.",
                            },
                            {
                                "type": "Progressing",
                                "status": "True",
                                "reason": "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                                "message": f'ReplicaSet "{name}-{short_hash(containers)}" '
                                + ("has successfully progressed." if complete else "is progressing."),
                            },
                        ],
                    },
                }
            )
            for n, images in enumerate(running):
                pods.append(self.pod(namespace, name, labels, images, n, f"{where}.pods[{n}]"))
        return {"deployments": deployments, "pods": pods}

    def pod(self, namespace, owner, labels, images, n, where):
        template_hash = short_hash(images)
        name = f"{owner}-{template_hash}-{short_hash([template_hash, n], 5)}"
        statuses = []
        for container, image in images.items():
            repository, digest = split_image(image, where)
            statuses.append(
                {
                    "name": container,
                    "image": image,
                    "imageID": f"{repository}@{digest}",
                    "containerID": "containerd://" + short_hash([name, container], 64),
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": self.created}},
                }
            )
        conditions = [
            {"type": t, "status": "True", "lastTransitionTime": self.created}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self.metadata(
                namespace, name, dict(labels, **{"pod-template-hash": template_hash})
            ),
            "spec": {
                "nodeName": "demo-node",
                "containers": [{"name": c, "image": image} for c, image in images.items()],
            },
            "status": {
                "phase": "Running",
                "conditions": conditions,
                "podIP": "10.0.0.%d" % (n + 2),
                "startTime": self.created,
                "containerStatuses": statuses,
            },
        }

    def metadata(self, namespace, name, labels, generation=None):
        meta = {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"demo-cluster/{namespace}/{name}")),
            "resourceVersion": str(self.version),
            "creationTimestamp": self.created,
            "labels": labels,
        }
        if generation is not None:
            meta["generation"] = generation
        return meta


def status(code, reason, message, details=None):
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return code, body


def route(path):
    """'/api/v1/namespaces/ns/pods/name' -> (prefix, namespace, plural, name), or None."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        prefix, rest = "/api/v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        prefix, rest = "/" + "/".join(parts[:3]), parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if len(rest) == 1:
        return prefix, namespace, rest[0], None
    if len(rest) == 2 and namespace is not None:
        return prefix, namespace, rest[0], rest[1]
    return None


def not_found():
    """As the API server answers for a resource it does not serve (a CRD not installed)."""
    return status(404, "NotFound", "the server could not find the requested resource", {})


def answer(cluster, method, target):
    """(HTTP status, JSON body) for one request."""
    url = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
    if url.path == "/version":
        return 200, {
            "major": "1",
            "minor": "30",
            "gitVersion": "v1.30.0-tagpin-demo-cluster",
            "platform": "linux/amd64",
        }
    if url.path in ("/healthz", "/readyz", "/livez"):
        return 200, "ok"
    if method != "GET":
        return status(
            405,
            "MethodNotAllowed",
            f"the tagpin demo cluster is read-only: {method} is not served",
        )
    found = route(url.path)
    if found is None:
        return not_found()
    prefix, namespace, plural, name = found
    served = SERVED.get((prefix, plural))
    empty = EMPTY_KINDS.get((prefix, plural))
    if served is None and empty is None:
        return not_found()
    if query.get("watch") in ("1", "true"):
        return status(
            405,
            "MethodNotAllowed",
            "the tagpin demo cluster serves no watches; list again to see changes",
        )
    for selector in ("labelSelector", "fieldSelector"):
        if query.get(selector):
            return status(
                400,
                "BadRequest",
                f"the tagpin demo cluster does not filter lists: {selector} is not supported",
            )
    try:
        version, objects = cluster.current()
    except StateError as e:
        return status(500, "InternalError", str(e))
    if served is not None:
        api_version, list_kind, key = served
        items = [o for o in objects[key] if namespace in (None, o["metadata"]["namespace"])]
    else:
        api_version, list_kind = empty
        items = []
    if name is not None:
        for item in items:
            if item["metadata"]["name"] == name:
                return 200, item
        group = "" if prefix == "/api/v1" else prefix.split("/")[2]
        return status(
            404,
            "NotFound",
            f'{plural}{"." + group if group else ""} "{name}" not found',
            {"name": name, "group": group, "kind": plural},
        )
    return list_page(items, api_version, list_kind, version, query)


def list_page(items, api_version, list_kind, version, query):
    """One page of a list: `limit` items from the `continue` token's offset."""
    start = 0
    token = query.get("continue")
    if token:
        try:
            state = json.loads(base64.urlsafe_b64decode(token.encode()))
            token_version, start = str(state["rv"]), int(state["start"])
        except (ValueError, KeyError, TypeError):
            return status(400, "BadRequest", "continue key is not valid")
        if token_version != version:
            # The state changed since the first page; this server keeps no old snapshots.
            return status(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter.",
            )
    try:
        limit = int(query.get("limit") or 0)
    except ValueError:
        return status(400, "BadRequest", "limit must be a whole number")
    end = len(items) if limit <= 0 else min(len(items), start + limit)
    metadata = {"resourceVersion": version}
    if end < len(items):
        metadata["continue"] = base64.urlsafe_b64encode(
            json.dumps({"rv": version, "start": end}).encode()
        ).decode()
        metadata["remainingItemCount"] = len(items) - end
    return 200, {
        "kind": list_kind,
        "apiVersion": api_version,
        "metadata": metadata,
        "items": items[start:end],
    }


def handler(cluster, log):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "tagpin-demo-cluster"
        # Headers and body go out in two writes; without this, Nagle's algorithm and the
        # client's delayed ACK hold the body back about 40 ms on every request.
        disable_nagle_algorithm = True

        def handle_any(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            code, body = answer(cluster, self.command, self.path)
            if isinstance(body, str):
                data, content_type = body.encode(), "text/plain; charset=utf-8"
            else:
                data, content_type = json.dumps(body).encode(), "application/json"
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            what = body.get("kind", "") if isinstance(body, dict) else ""
            if what.endswith("List"):
                what += f" ({len(body['items'])} items)"
            elif what == "Status":
                what += f" {body['reason']}"
            log(f"{self.command} {self.path} -> {code} {what}".rstrip())

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

        def log_message(self, format, *args):  # noqa: A002 (the base class's name)
            pass  # each request is logged once, with its answer, by handle_any

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", required=True, help="the JSON state file to serve")
    parser.add_argument("--url-file", help="write http://127.0.0.1:PORT here once listening")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--log", help="append one line per request here (default: stderr)")
    args = parser.parse_args()

    cluster = Cluster(args.state)
    cluster.current()  # a state file that cannot be read stops it here, not at the first request
    out = open(args.log, "a", buffering=1, encoding="utf-8") if args.log else sys.stderr
    lock = threading.Lock()

    def log(line):
        with lock:
            out.write(line + "\n")
            out.flush()

    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(cluster, log))
    server.daemon_threads = True
    url = f"http://127.0.0.1:{server.server_address[1]}"
    if args.url_file:
        with open(args.url_file + ".tmp", "w", encoding="utf-8") as f:
            f.write(url + "\n")
        os.replace(args.url_file + ".tmp", args.url_file)
    log(f"tagpin demo cluster serving {args.state} on {url}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    try:
        main()
    except StateError as e:
        sys.exit(f"demo-cluster: {e}")
