//! `kubectl kustomize`, the way a user renders a kustomization: offline, the real kustomize
//! that ships inside kubectl (`KUBECTL` names another kubectl binary).

use std::path::Path;
use std::process::Command;

use serde::Deserialize;
use serde_yaml::Value;

/// The objects `kubectl kustomize DIR` builds, or kustomize's own error output when it refuses
/// the kustomization. Panics if kubectl cannot be run at all: these tests need it.
pub fn kustomize(dir: &Path) -> Result<Vec<Value>, String> {
    let kubectl = std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into());
    let output = Command::new(&kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {kubectl:?} kustomize {} ({e}); these tests need kubectl \
                 (1.27 or newer; set KUBECTL to its path)",
                dir.display()
            )
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "`{} kustomize {}` failed ({}):\n{}\n{stdout}",
            kubectl.to_string_lossy(),
            dir.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    serde_yaml::Deserializer::from_str(&stdout)
        .map(|document| {
            Value::deserialize(document).map_err(|e| {
                format!(
                    "kustomize output of {} is not YAML: {e}\n{stdout}",
                    dir.display()
                )
            })
        })
        .filter(|v| !matches!(v, Ok(Value::Null)))
        .collect()
}
