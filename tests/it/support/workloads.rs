//! Live workloads on the local Kubernetes API server, as their controllers and the kubelet
//! leave them: what tagpin's verifier reads to judge a pin.
//!
//! Many tests need the same picture: a Deployment a GitOps tool applied, its rollout finished
//! (the status the deployment controller writes), and pods whose
//! `status.containerStatuses[].imageID` says which digest each node pulled; or a CronJob and the
//! Jobs it ran. These builders write it once, with the shapes of real objects (the server checks
//! every one against the Kubernetes types), so a test says only what is particular to it:
//!
//! ```ignore
//! let web = LiveDeployment::new("shop", "web").container("app", &image).replicas(2);
//! web.apply(&kube);
//! web.pod("web-1").running(&kube, &[&image_id(&image)]);
//! web.pod("web-2").image("ghcr.io/acme/web:1").running(&kube, &[&old_id]);
//! ```

use std::time::SystemTime;

use serde_json::{json, Value};

use super::kube::{deployment, pod, running_pod_status, KubeServer};

/// The imageID a container runtime reports for a container that pulled `image` by digest:
/// `host/org/app:1.0@sha256:…` runs as `host/org/app@sha256:…` (the tag is dropped; CRI-O and
/// containerd report the repository and the digest).
pub fn image_id(image: &str) -> String {
    let (name, digest) = image
        .rsplit_once('@')
        .unwrap_or_else(|| panic!("image_id: {image} is not pinned to a digest"));
    // A tag follows the last `:` after the last `/` (a registry port comes before it).
    let repository = match name.rsplit_once(':') {
        Some((repository, tag)) if !tag.contains('/') => repository,
        _ => name,
    };
    format!("{repository}@{digest}")
}

/// Every `(name, image)` container on `image`.
fn all_on(containers: &mut [(String, String)], image: &str) {
    for (_, old) in containers {
        *old = image.to_string();
    }
}

fn pairs(pairs: &[(String, String)]) -> Vec<(&str, &str)> {
    pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// A Deployment as a GitOps tool applied it: selector and template labelled `app: <app>`
/// (the Deployment's name unless [`LiveDeployment::app`] says otherwise), one replica unless
/// [`LiveDeployment::replicas`] says otherwise.
#[derive(Clone, Debug)]
pub struct LiveDeployment {
    namespace: String,
    name: String,
    app: String,
    labels: Vec<(String, String)>,
    annotations: Vec<(String, String)>,
    containers: Vec<(String, String)>,
    replicas: usize,
}

impl LiveDeployment {
    pub fn new(namespace: &str, name: &str) -> LiveDeployment {
        LiveDeployment {
            namespace: namespace.to_string(),
            name: name.to_string(),
            app: name.to_string(),
            labels: Vec::new(),
            annotations: Vec::new(),
            containers: Vec::new(),
            replicas: 1,
        }
    }

    /// The `app` label its selector, template and pods carry.
    pub fn app(mut self, app: &str) -> LiveDeployment {
        self.app = app.to_string();
        self
    }

    /// A label on the Deployment itself (such as `app.kubernetes.io/managed-by: Helm`).
    pub fn label(mut self, key: &str, value: &str) -> LiveDeployment {
        self.labels.push((key.to_string(), value.to_string()));
        self
    }

    /// An annotation on the Deployment (such as `meta.helm.sh/release-name`).
    pub fn annotation(mut self, key: &str, value: &str) -> LiveDeployment {
        self.annotations.push((key.to_string(), value.to_string()));
        self
    }

    /// A container of the pod template.
    pub fn container(mut self, name: &str, image: &str) -> LiveDeployment {
        self.containers.push((name.to_string(), image.to_string()));
        self
    }

    pub fn replicas(mut self, replicas: usize) -> LiveDeployment {
        self.replicas = replicas;
        self
    }

    /// Applies the Deployment and writes the status the deployment controller writes once the
    /// rollout of the stored generation finished: every replica updated, ready and available
    /// (what `kubectl rollout status` calls done). Applying a changed template is a new
    /// generation, observed and rolled out. Returns the stored object with its status.
    pub fn apply(&self, kube: &KubeServer) -> Value {
        self.apply_with_updated(kube, self.replicas)
    }

    /// Applies the Deployment with its rollout under way: the generation observed, no replica
    /// updated to the new template yet.
    pub fn apply_rolling_out(&self, kube: &KubeServer) -> Value {
        self.apply_with_updated(kube, 0)
    }

    fn apply_with_updated(&self, kube: &KubeServer, updated: usize) -> Value {
        assert!(
            !self.containers.is_empty(),
            "LiveDeployment {}/{} has no container",
            self.namespace,
            self.name
        );
        let app = [("app", self.app.as_str())];
        let mut object = deployment(&self.namespace, &self.name, &app, &pairs(&self.containers));
        object["spec"]["replicas"] = json!(self.replicas);
        for (key, value) in &self.labels {
            object["metadata"]["labels"][key] = json!(value);
        }
        for (key, value) in &self.annotations {
            object["metadata"]["annotations"][key] = json!(value);
        }
        let stored = kube.apply(object);
        let replicas = self.replicas;
        kube.set_status(
            "Deployment",
            &self.namespace,
            &self.name,
            json!({"observedGeneration": stored["metadata"]["generation"], "replicas": replicas,
                   "updatedReplicas": updated, "readyReplicas": replicas,
                   "availableReplicas": replicas}),
        )
    }

    /// Pod `name` of this Deployment: its labels and the template's containers (for a pod of
    /// an older template, follow with [`LivePod::image`]).
    pub fn pod(&self, name: &str) -> LivePod {
        LivePod {
            namespace: self.namespace.clone(),
            name: name.to_string(),
            labels: vec![("app".to_string(), self.app.clone())],
            containers: self.containers.clone(),
            node: None,
        }
    }
}

/// A pod, in one of the states the kubelet reports.
#[derive(Clone, Debug)]
pub struct LivePod {
    namespace: String,
    name: String,
    labels: Vec<(String, String)>,
    containers: Vec<(String, String)>,
    /// `spec.nodeName`, once the scheduler placed it.
    node: Option<String>,
}

impl LivePod {
    /// A pod of no workload yet: add its labels and containers.
    pub fn new(namespace: &str, name: &str) -> LivePod {
        LivePod {
            namespace: namespace.to_string(),
            name: name.to_string(),
            labels: Vec::new(),
            containers: Vec::new(),
            node: None,
        }
    }

    /// Scheduled to `node` (`spec.nodeName`): whose image cache its containers ran from.
    pub fn node(mut self, node: &str) -> LivePod {
        self.node = Some(node.to_string());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> LivePod {
        self.labels.push((key.to_string(), value.to_string()));
        self
    }

    pub fn container(mut self, name: &str, image: &str) -> LivePod {
        self.containers.push((name.to_string(), image.to_string()));
        self
    }

    /// Every container runs `image` instead: a pod of an older template.
    pub fn image(mut self, image: &str) -> LivePod {
        all_on(&mut self.containers, image);
        self
    }

    /// Applies the pod and sets `status` on it.
    fn apply_with(&self, kube: &KubeServer, status: Value) -> Value {
        let mut object = pod(
            &self.namespace,
            &self.name,
            &pairs(&self.labels),
            &pairs(&self.containers),
        );
        if let Some(node) = &self.node {
            object["spec"]["nodeName"] = json!(node);
        }
        kube.apply(object);
        kube.set_pod_status(&self.namespace, &self.name, status)
    }

    /// The `(name, image, imageID)` of each container, `image_ids` in container order.
    fn pulled<'a, S: AsRef<str>>(&'a self, image_ids: &'a [S]) -> Vec<(&'a str, &'a str, &'a str)> {
        assert_eq!(
            image_ids.len(),
            self.containers.len(),
            "pod {}: one imageID per container",
            self.name
        );
        self.containers
            .iter()
            .zip(image_ids)
            .map(|((name, image), id)| (name.as_str(), image.as_str(), id.as_ref()))
            .collect()
    }

    /// Running and ready, each container reporting the imageID at its place in `image_ids`.
    pub fn running<S: AsRef<str>>(&self, kube: &KubeServer, image_ids: &[S]) -> Value {
        self.apply_with(kube, running_pod_status(&self.pulled(image_ids)))
    }

    /// Running and ready again after its containers exited with an error `restarts` times
    /// (as the kubelet reports a container it restarted: `restartCount` and the last
    /// termination in `lastState`).
    pub fn restarted<S: AsRef<str>>(
        &self,
        kube: &KubeServer,
        image_ids: &[S],
        restarts: u32,
    ) -> Value {
        let mut status = running_pod_status(&self.pulled(image_ids));
        let now = super::rfc3339(SystemTime::now());
        for container in status["containerStatuses"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            container["restartCount"] = json!(restarts);
            container["lastState"] = json!({"terminated": {
                "exitCode": 137, "reason": "OOMKilled", "startedAt": now, "finishedAt": now,
                "containerID": container["containerID"].clone()}});
        }
        self.apply_with(kube, status)
    }

    /// Its containers ran `image_ids` and exited 0: a Job's finished pod.
    pub fn succeeded<S: AsRef<str>>(&self, kube: &KubeServer, image_ids: &[S]) -> Value {
        let mut status = running_pod_status(&self.pulled(image_ids));
        let now = super::rfc3339(SystemTime::now());
        status["phase"] = json!("Succeeded");
        for condition in status["conditions"].as_array_mut().into_iter().flatten() {
            if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
                condition["status"] = json!("False");
                condition["reason"] = json!("PodCompleted");
            }
        }
        for container in status["containerStatuses"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            container["ready"] = json!(false);
            container["started"] = json!(false);
            container["state"] = json!({"terminated": {
                "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now,
                "containerID": container["containerID"].clone()}});
        }
        self.apply_with(kube, status)
    }

    /// Pending, its containers not started (no imageID yet) and waiting with `reason`, as the
    /// kubelet reports `ContainerCreating`, `ErrImagePull` or `ImagePullBackOff`; an empty
    /// `message` is left out, as the kubelet leaves it out.
    pub fn waiting(&self, kube: &KubeServer, reason: &str, message: &str) -> Value {
        let mut waiting = json!({"reason": reason});
        if !message.is_empty() {
            waiting["message"] = json!(message);
        }
        let statuses: Vec<Value> = self
            .containers
            .iter()
            .map(|(name, image)| {
                json!({"name": name, "image": image, "imageID": "", "ready": false,
                       "started": false, "restartCount": 0, "state": {"waiting": waiting}})
            })
            .collect();
        self.apply_with(
            kube,
            json!({"phase": "Pending", "containerStatuses": statuses}),
        )
    }

    /// Running but not ready: its containers started from `image_ids`, exited with an error
    /// six times and wait in `CrashLoopBackOff` with the kubelet's `message`.
    pub fn crash_looping<S: AsRef<str>>(
        &self,
        kube: &KubeServer,
        image_ids: &[S],
        message: &str,
    ) -> Value {
        let statuses: Vec<Value> = self
            .pulled(image_ids)
            .iter()
            .map(|(name, image, id)| {
                json!({"name": name, "image": image, "imageID": id, "ready": false,
                       "started": false, "restartCount": 6,
                       "state": {"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                       "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}})
            })
            .collect();
        self.apply_with(
            kube,
            json!({"phase": "Running", "containerStatuses": statuses}),
        )
    }

    /// Evicted under node pressure after running `image_ids`: phase Failed, reason Evicted,
    /// kept until garbage collection.
    pub fn evicted<S: AsRef<str>>(&self, kube: &KubeServer, image_ids: &[S]) -> Value {
        let statuses: Vec<Value> = self
            .pulled(image_ids)
            .iter()
            .map(|(name, image, id)| {
                json!({"name": name, "image": image, "imageID": id, "ready": false,
                       "restartCount": 0,
                       "state": {"terminated": {"exitCode": 137, "reason": "Error"}}})
            })
            .collect();
        self.apply_with(
            kube,
            json!({"phase": "Failed", "reason": "Evicted",
                   "message": "The node was low on resource: memory.",
                   "containerStatuses": statuses}),
        )
    }
}

/// A CronJob as a GitOps tool applied it (schedule `0 3 * * *`, `restartPolicy: Never`), and
/// the Jobs its controller creates ([`LiveCronJob::run`]).
#[derive(Clone, Debug)]
pub struct LiveCronJob {
    namespace: String,
    name: String,
    containers: Vec<(String, String)>,
}

impl LiveCronJob {
    pub fn new(namespace: &str, name: &str) -> LiveCronJob {
        LiveCronJob {
            namespace: namespace.to_string(),
            name: name.to_string(),
            containers: Vec::new(),
        }
    }

    /// A container of the Job template.
    pub fn container(mut self, name: &str, image: &str) -> LiveCronJob {
        self.containers.push((name.to_string(), image.to_string()));
        self
    }

    fn pod_spec(containers: &[(String, String)]) -> Value {
        let containers: Vec<Value> = containers
            .iter()
            .map(|(name, image)| json!({"name": name, "image": image}))
            .collect();
        json!({"restartPolicy": "Never", "containers": containers})
    }

    /// Applies the CronJob; returns the stored object.
    pub fn apply(&self, kube: &KubeServer) -> Value {
        kube.apply(json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {
                "spec": LiveCronJob::pod_spec(&self.containers)}}}}
        }))
    }

    /// Job `run` as the CronJob controller creates it from the current template (owned by
    /// the CronJob applied on `kube`); for a run of an older template, follow with
    /// [`JobRun::image`].
    pub fn run(&self, kube: &KubeServer, run: &str) -> JobRun {
        let stored = kube
            .get("CronJob", &self.namespace, &self.name)
            .unwrap_or_else(|| panic!("no CronJob {}/{} to run", self.namespace, self.name));
        JobRun {
            namespace: self.namespace.clone(),
            name: run.to_string(),
            owner: json!({"apiVersion": "batch/v1", "kind": "CronJob", "name": self.name,
                          "uid": stored["metadata"]["uid"], "controller": true,
                          "blockOwnerDeletion": true}),
            containers: self.containers.clone(),
        }
    }
}

/// One run of a CronJob: its Job and the Job's pod `<run>-x1`.
#[derive(Clone, Debug)]
pub struct JobRun {
    namespace: String,
    name: String,
    owner: Value,
    containers: Vec<(String, String)>,
}

impl JobRun {
    /// Every container runs `image` instead: a run from an older template.
    pub fn image(mut self, image: &str) -> JobRun {
        all_on(&mut self.containers, image);
        self
    }

    /// The Job's pod: labelled with the Job's controller uid, as its selector says.
    fn apply_job(&self, kube: &KubeServer, status: Value) -> LivePod {
        // The Job controller labels by the Job's own uid; the test gives that uid up front.
        let uid = format!(
            "00000000-0000-4000-8000-{:012x}",
            fnv(&format!("{}/{}", self.namespace, self.name)) & 0xffff_ffff_ffff
        );
        let labels = json!({"batch.kubernetes.io/controller-uid": uid,
                            "batch.kubernetes.io/job-name": self.name,
                            "controller-uid": uid, "job-name": self.name});
        kube.apply(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": uid,
                         "labels": labels, "ownerReferences": [self.owner]},
            "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": LiveCronJob::pod_spec(&self.containers)}}
        }));
        kube.set_status("Job", &self.namespace, &self.name, status);
        let mut pod = LivePod::new(&self.namespace, &format!("{}-x1", self.name));
        for (key, value) in labels.as_object().into_iter().flatten() {
            pod = pod.label(key, value.as_str().unwrap_or_default());
        }
        for (name, image) in &self.containers {
            pod = pod.container(name, image);
        }
        pod
    }

    /// The run finished: the Job complete, its pod succeeded after running `image_ids`.
    pub fn succeeded<S: AsRef<str>>(&self, kube: &KubeServer, image_ids: &[S]) {
        let now = super::rfc3339(SystemTime::now());
        let status = json!({"succeeded": 1, "ready": 0, "startTime": now, "completionTime": now,
            "conditions": [{"type": "Complete", "status": "True", "lastProbeTime": now,
                            "lastTransitionTime": now}]});
        self.apply_job(kube, status).succeeded(kube, image_ids);
    }

    /// The run is under way: the Job active, its pod running `image_ids`.
    pub fn active<S: AsRef<str>>(&self, kube: &KubeServer, image_ids: &[S]) {
        let now = super::rfc3339(SystemTime::now());
        let status = json!({"active": 1, "ready": 1, "startTime": now});
        self.apply_job(kube, status).running(kube, image_ids);
    }

    /// The run is starting: the Job active, its pod waiting with `reason` (see
    /// [`LivePod::waiting`]).
    pub fn waiting(&self, kube: &KubeServer, reason: &str, message: &str) {
        let now = super::rfc3339(SystemTime::now());
        let status = json!({"active": 1, "ready": 0, "startTime": now});
        self.apply_job(kube, status).waiting(kube, reason, message);
    }
}

/// FNV-1a, for a Job uid that is the same for the same run.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Argo Rollouts installed: its `Rollout` CRD served (`rollouts.argoproj.io/v1alpha1`, short
/// name `ro`, a status subresource), as `kubectl apply -f install.yaml` leaves a cluster.
pub fn install_argo_rollouts(kube: &KubeServer) {
    kube.register_custom_resource(
        "argoproj.io",
        "v1alpha1",
        "Rollout",
        "rollouts",
        true,
        &["ro"],
    );
}

/// The label Argo Rollouts gives each ReplicaSet it creates, its selector and its pods.
pub const ROLLOUT_HASH_LABEL: &str = "rollouts-pod-template-hash";

/// A ReplicaSet the Argo Rollouts controller created for one pod template of a Rollout, as
/// argo-rollouts' own test data shows them (`pkg/kubectl-argo-rollouts/info/testdata/canary/
/// canary-rs.yaml`): named `<rollout>-<hash>`, owned by the Rollout (controller), its selector,
/// template and pods labelled with the Rollout's `matchLabels` and
/// `rollouts-pod-template-hash: <hash>`, its status as the ReplicaSet controller writes it.
#[derive(Clone, Debug)]
pub struct RolloutReplicaSet {
    namespace: String,
    name: String,
    labels: Vec<(String, String)>,
    containers: Vec<(String, String)>,
}

impl RolloutReplicaSet {
    /// Applies the ReplicaSet of `hash` for `rollout` (the Rollout as stored), its `replicas`
    /// all ready, its template's containers `containers`.
    pub fn apply(
        kube: &KubeServer,
        rollout: &Value,
        hash: &str,
        containers: &[(&str, &str)],
        replicas: usize,
    ) -> RolloutReplicaSet {
        let namespace = rollout["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        let rollout_name = rollout["metadata"]["name"].as_str().unwrap();
        let name = format!("{rollout_name}-{hash}");
        let mut labels: Vec<(String, String)> = rollout["spec"]["selector"]["matchLabels"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        labels.push((ROLLOUT_HASH_LABEL.to_string(), hash.to_string()));
        let label_map: serde_json::Map<String, Value> =
            labels.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let spec_containers: Vec<Value> = containers
            .iter()
            .map(|(name, image)| json!({"name": name, "image": image}))
            .collect();
        kube.apply(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": name, "namespace": namespace, "labels": label_map,
                "annotations": {"rollout.argoproj.io/desired-replicas": replicas.to_string()},
                "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                    "name": rollout_name, "uid": rollout["metadata"]["uid"],
                    "controller": true, "blockOwnerDeletion": true}],
            },
            "spec": {"replicas": replicas, "selector": {"matchLabels": label_map},
                     "template": {"metadata": {"labels": label_map},
                                  "spec": {"containers": spec_containers}}},
        }));
        kube.set_status(
            "ReplicaSet",
            &namespace,
            &name,
            json!({"observedGeneration": 1, "replicas": replicas, "fullyLabeledReplicas": replicas,
                   "readyReplicas": replicas, "availableReplicas": replicas}),
        );
        RolloutReplicaSet {
            namespace,
            name,
            labels,
            containers: containers
                .iter()
                .map(|(n, i)| (n.to_string(), i.to_string()))
                .collect(),
        }
    }

    /// Pod `<replica set>-<suffix>` of this ReplicaSet, on its template.
    pub fn pod(&self, suffix: &str) -> LivePod {
        LivePod {
            namespace: self.namespace.clone(),
            name: format!("{}-{suffix}", self.name),
            labels: self.labels.clone(),
            containers: self.containers.clone(),
            node: None,
        }
    }
}
