//! Lists what the GitOps tools say they applied: Argo CD Applications, Flux Kustomizations
//! and GitRepositories, and Flux HelmReleases, in all namespaces, as JSON for the pure readers
//! of [`crate::verify::judge::gitops`] and [`crate::verify::judge::helm`].
//!
//! Most clusters run one of the tools, or none: a kind that is not installed (404) is simply
//! absent. An impersonated tenant refused a kind in all namespaces reads those of its own
//! namespace, where its Flux objects live, and the listing says what that leaves out.

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

use crate::cluster::{impersonation_refused, Cluster, ClusterError, Follow, ServiceAccount};

/// The GitOps objects the cluster holds, as listed (JSON), for
/// [`crate::verify::judge::gitops`] to read.
#[derive(Debug, Default)]
pub struct GitOpsListing {
    pub applications: Vec<serde_json::Value>,
    pub kustomizations: Vec<serde_json::Value>,
    pub git_repositories: Vec<serde_json::Value>,
    /// Why some kinds could not be listed in every namespace, where that is worth saying: an
    /// impersonated ServiceAccount's refusals (a kind simply not installed is not).
    pub unread: Vec<String>,
    /// Why Argo CD Applications could not all be listed (one of `unread`), for the verdicts
    /// of the Helm pins an Application deploys.
    pub applications_unread: Option<String>,
}

/// Objects listed, and why some could not be (see [`list_everywhere`]).
type Everywhere = (Vec<serde_json::Value>, Option<String>);

/// Every Argo CD Application, Flux Kustomization and Flux GitRepository, in all namespaces,
/// page by page. A kind whose CRD is not installed (404) or that tagpin may not list (403)
/// is simply absent: most clusters run one of the two tools, or neither. An impersonated
/// ServiceAccount refused them in all namespaces reads those of its own namespace (where a
/// tenant's Flux objects live), and [`GitOpsListing::unread`] says so.
pub async fn objects(cluster: &Cluster) -> Result<GitOpsListing, ClusterError> {
    let (applications, kustomizations, git_repositories) = futures::try_join!(
        list_everywhere(
            cluster,
            "argoproj.io",
            "v1alpha1",
            "Application",
            "applications"
        ),
        list_everywhere(
            cluster,
            "kustomize.toolkit.fluxcd.io",
            "v1",
            "Kustomization",
            "kustomizations"
        ),
        list_everywhere(
            cluster,
            "source.toolkit.fluxcd.io",
            "v1",
            "GitRepository",
            "gitrepositories"
        ),
    )?;
    let unread = [&applications.1, &kustomizations.1, &git_repositories.1]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    Ok(GitOpsListing {
        applications: applications.0,
        kustomizations: kustomizations.0,
        git_repositories: git_repositories.0,
        unread,
        applications_unread: applications.1,
    })
}

/// Every Flux HelmRelease (`helm.toolkit.fluxcd.io/v2`, Flux 2.3 and later) in all
/// namespaces, and why some or all could not be read: the CRD is not installed (404), or
/// tagpin may not list them (403; an impersonated ServiceAccount then reads those of its
/// own namespace). Unlike the other GitOps objects, a pin names its HelmRelease, so its
/// verdict must say why it is not among them.
pub async fn helm_releases(cluster: &Cluster) -> Result<Everywhere, ClusterError> {
    let gvk = GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "helmreleases");
    let status = match cluster.list_objects(None, &resource, Follow::No).await {
        Ok(items) => return Ok((as_json(&items), None)),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => status,
        Err(source) => {
            return Err(cluster.failed(
                "helmreleases.helm.toolkit.fluxcd.io in all namespaces".to_string(),
                source,
            ))
        }
    };
    let why = match (status.code, cluster.acting_as()) {
        (404, _) => "the cluster serves no helm.toolkit.fluxcd.io/v2 HelmReleases (CRD not \
                     installed, or Flux older than 2.3)"
            .to_string(),
        _ if impersonation_refused(&status) => {
            return Err(cluster.failed(
                "helmreleases.helm.toolkit.fluxcd.io in all namespaces".to_string(),
                kube::Error::Api(status),
            ))
        }
        (_, Some(account)) => return list_own_namespace(cluster, account, &resource).await,
        (_, None) => format!(
            "tagpin may not list HelmReleases ({})",
            cluster
                .server()
                .refused("helmreleases.helm.toolkit.fluxcd.io", status.code)
        ),
    };
    Ok((Vec::new(), Some(why)))
}

/// Every object of a custom resource in all namespaces, as JSON, and why not all could
/// be read. A resource not served (404) or not readable (403) has none, and says nothing
/// (most clusters run one GitOps tool, or none); an impersonated ServiceAccount refused
/// them in all namespaces reads those of its own namespace instead, and says so.
async fn list_everywhere(
    cluster: &Cluster,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Result<Everywhere, ClusterError> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    match cluster.list_objects(None, &resource, Follow::No).await {
        Ok(items) => Ok((as_json(&items), None)),
        Err(kube::Error::Api(status))
            if (status.code == 403 && !impersonation_refused(&status)) || status.code == 404 =>
        {
            if let (403, Some(account)) = (status.code, cluster.acting_as()) {
                return list_own_namespace(cluster, account, &resource).await;
            }
            tracing::debug!("no {plural}.{group} to consult (HTTP {})", status.code);
            Ok((Vec::new(), None))
        }
        Err(source) => Err(cluster.failed(format!("{plural}.{group} in all namespaces"), source)),
    }
}

/// The objects of `resource` in `account`'s own namespace, read after it was refused them
/// in all namespaces, with what that leaves out. Never the operator's own identity: a
/// tenant sees what its RBAC grants, or nothing.
async fn list_own_namespace(
    cluster: &Cluster,
    account: &ServiceAccount,
    resource: &ApiResource,
) -> Result<Everywhere, ClusterError> {
    let name = match resource.group.as_str() {
        "" => resource.plural.clone(),
        group => format!("{}.{group}", resource.plural),
    };
    let namespace = &account.namespace;
    let refused = format!("the ServiceAccount {account} may not list {name} in all namespaces");
    match cluster
        .list_objects(Some(namespace), resource, Follow::No)
        .await
    {
        Ok(items) => Ok((
            as_json(&items),
            Some(format!("{refused}; only those of {namespace} were read")),
        )),
        Err(kube::Error::Api(status))
            if (status.code == 403 && !impersonation_refused(&status)) || status.code == 404 =>
        {
            Ok((Vec::new(), Some(format!("{refused}, nor in {namespace}"))))
        }
        Err(source) => Err(cluster.failed(format!("{name} in namespace {namespace}"), source)),
    }
}

/// Listed objects as JSON, for the pure readers of [`crate::verify::judge::gitops`] and
/// [`crate::verify::judge::helm`].
fn as_json(items: &[DynamicObject]) -> Vec<serde_json::Value> {
    items
        .iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .collect()
}
