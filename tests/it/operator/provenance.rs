//! Build provenance in a `PinnedRepository` (issue #41): its `images.provenance` keys name keys
//! of the object's labelled `secret_ref` Secret, read at each reconcile, as signatures' do.

use crate::operator::{cluster, condition, pinned_repository, spec, Operator, NS};
use crate::provenance::{attest, deployment, envelope, provenance, BUILDER, SOURCE};
use crate::support;
use crate::support::eventually;

use serde_json::json;
use sigstore_crypto::KeyPair;
use support::git::BareRepo;
use support::kube::TAGPIN_SECRET;
use support::registry::{Mode, TestRegistry};

#[tokio::test(flavor = "multi_thread")]
async fn keys_from_the_objects_secret_let_attested_digests_in_and_keep_others_out() {
    let registry = TestRegistry::start(Mode::Plain).await;
    let host = registry.host();
    let ci = KeyPair::generate_ecdsa_p256().unwrap();
    let web = registry.push_image("acme/web", "1.0", "web").await;
    let statement = provenance(&web.manifest, BUILDER, SOURCE);
    attest(
        &registry,
        "acme/web",
        &web.manifest,
        &[envelope(&statement, Some(&ci))],
    )
    .await;
    registry.push_image("acme/api", "1.0", "api").await;
    let api_yaml = deployment("api", &format!("{host}/acme/api:1.0"));
    let repo = BareRepo::create(&[
        (
            "apps/web.yaml",
            &deployment("web", &format!("{host}/acme/web:1.0")),
        ),
        ("apps/api.yaml", &api_yaml),
    ]);
    let kube = cluster().await;
    let pem = ci.public_key_der().unwrap().to_pem();
    kube.apply(support::kube::secret(
        NS,
        "trust",
        &[TAGPIN_SECRET],
        &[("ci.pub", &pem)],
    ));
    let mut attested = spec(&repo.file_url(), &host);
    attested["secret_ref"] = json!({"name": "trust"});
    attested["images"] = json!({"provenance": [{
        "match": format!("{host}/acme/*"),
        "builder_id": r"https://github\.com/actions/runner/.+",
        "source_repository": SOURCE,
        "keys": ["ci.pub"],
    }]});
    kube.apply(pinned_repository("web", json!({}), attested.clone()));
    let mut missing = attested;
    missing["images"]["provenance"][0]["keys"] = json!(["other.pub"]);
    kube.apply(pinned_repository("other", json!({}), missing));
    let dir = tempfile::tempdir().unwrap();
    let operator = Operator::start(dir.path(), &kube, "op", &[]).await;

    eventually("the attested digest is pinned", || {
        repo.read("main", "apps/web.yaml")
            .is_some_and(|text| text.contains(&web.manifest))
    })
    .await;
    eventually("the unattested one is refused, and said", || {
        condition(&kube, "web", "Ready").is_some_and(|c| {
            c["reason"] == "PartiallyPinned"
                && c["message"].as_str().is_some_and(|m| {
                    m.contains("apps/api.yaml:10") && m.contains("no provenance attestation")
                })
        })
    })
    .await;
    eventually(
        "a key the Secret lacks stalls its object, naming the field",
        || {
            condition(&kube, "other", "Ready").is_some_and(|c| {
                c["reason"] == "SecretNotFound"
                    && c["message"].as_str().is_some_and(|m| {
                        m.contains("spec.images.provenance[0].keys[0]")
                            && m.contains("\"other.pub\"")
                    })
            })
        },
    )
    .await;
    operator.stop().await;
    assert_eq!(repo.read("main", "apps/api.yaml").unwrap(), api_yaml);
}
