//! The manifests in `deploy/` grant tagpin least privilege.

use std::path::Path;

#[test]
fn the_verifier_role_grants_only_read_verbs() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/rbac.yaml"))
            .unwrap();
    let mut rules_seen = 0;
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(document).unwrap();
        if value["kind"] != "ClusterRole" && value["kind"] != "Role" {
            continue;
        }
        for rule in value["rules"].as_sequence().unwrap() {
            rules_seen += 1;
            for verb in rule["verbs"].as_sequence().unwrap() {
                let verb = verb.as_str().unwrap();
                assert!(
                    ["get", "list", "watch"].contains(&verb),
                    "write verb {verb} in {rule:?}"
                );
            }
            let resources: Vec<&str> = rule["resources"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            assert!(
                !resources.contains(&"*") && !resources.contains(&"secrets"),
                "{resources:?}"
            );
        }
    }
    assert_eq!(rules_seen, 4);
}

use serde::Deserialize;
