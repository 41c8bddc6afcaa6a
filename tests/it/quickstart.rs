//! `examples/quickstart.sh` is documentation that runs: it starts a real registry, pushes an
//! image with curl, builds a bare Git repository from `examples/gitops` and runs `tagpin sync`
//! three times, then promotes from staging to production against demo clusters
//! (`examples/demo-cluster.py`, a read-only stand-in for the Kubernetes API), checking each
//! result itself. This test runs it against the binary under test with the registry on a free
//! port (the demo clusters pick their own), so it can run in parallel with the other tests.

use std::fs::File;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The whole quickstart normally takes a few seconds; this bounds a hang.
const TIMEOUT: Duration = Duration::from_secs(300);

/// How often to try again on a new port when another process took ours first.
const ATTEMPTS: usize = 3;

/// A loopback port that was free a moment ago (the registry binds it itself, so it may race;
/// the script detects that and the test retries on another port).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local_addr")
        .port()
}

/// Runs the quickstart on `port`; returns its exit code (None: killed) and its output
/// (stdout and stderr interleaved, as a person would see them).
fn run_quickstart(port: u16) -> (Option<i32>, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("temp dir");
    let log_path = dir.path().join("quickstart.log");
    let log = File::create(&log_path).expect("create log file");
    let mut child = Command::new("bash")
        .arg("examples/quickstart.sh")
        .current_dir(root)
        .env("TAGPIN", env!("CARGO_BIN_EXE_tagpin"))
        .env("QUICKSTART_PORT", port.to_string())
        .env("TMPDIR", dir.path())
        .env_remove("QUICKSTART_KEEP")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone log file handle"))
        .stderr(log)
        .spawn()
        .expect("run bash examples/quickstart.sh");
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the quickstart") {
            break status.code();
        }
        if Instant::now() > deadline {
            // SIGTERM first, so the script's trap stops its registry; then make sure.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let grace = Instant::now() + Duration::from_secs(5);
            while Instant::now() < grace && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    (status, output)
}

#[test]
fn the_quickstart_pins_moves_the_pin_does_nothing_then_promotes() {
    let (status, output) = (0..ATTEMPTS)
        .map(|_| run_quickstart(free_port()))
        .find(|(status, output)| {
            // Only a lost race for the port is worth another try.
            !(*status == Some(1) && output.contains("address already in use"))
        })
        .unwrap_or_else(|| panic!("the registry lost the race for a free port {ATTEMPTS} times"));

    assert_eq!(status, Some(0), "quickstart failed:\n{output}");
    // The script checks the results itself; these are the lines a reader relies on.
    let expected = [
        "==> 1. Start a local registry",
        "ok: tagpin resolve agrees: sha256:",
        "==> 4. Pass 1",
        "+    digest: sha256:",
        "ok: one commit added; overlays/staging/kustomization.yaml pins sha256:",
        "==> 6. Pass 2",
        "-    digest: sha256:",
        "+    digest: sha256:",
        "ok: one commit added, one line changed",
        "==> 7. Pass 3",
        "nothing to pin",
        "ok: nothing to pin; main still has 3 commits",
        "==> 8. Start a demo cluster for staging",
        "ok: demo cluster for staging on http://127.0.0.1:",
        "==> 9. tagpin promote --to production: refused",
        "staging -> production (progressing at ",
        "1 out of 2 new replicas have been updated",
        "nothing promoted",
        "GET /apis/apps/v1/namespaces/sample-staging/deployments?",
        "ok: exit 3: staging has not converged on its pin; nothing committed",
        "==> 10. Staging converged",
        "staging -> production (converged at ",
        "Promote 1 image(s) from staging to production",
        "+++ b/overlays/production/kustomization.yaml",
        "+    digest: sha256:",
        "ok: one commit added, one line added; overlays/production/kustomization.yaml pins 1.0@sha256:",
        "==> 11. tagpin verify --stage production",
        "ok: demo cluster for production on http://127.0.0.1:",
        "Converged: all 1 pinned image converged",
        "ok: exit 0: production converged on sha256:",
        "quickstart: all checks passed",
    ];
    let mut from = 0;
    for line in expected {
        match output[from..].find(line) {
            Some(at) => from += at + line.len(),
            None => panic!("expected {line:?} (in this order) in the output:\n{output}"),
        }
    }
    assert_eq!(
        output.matches("committed ").count(),
        3,
        "three commits, in passes 1 and 2 and by the promotion:\n{output}"
    );
    // The script stops what it started: the registry and both demo clusters, each of which
    // it names with "(pid N" when it is up.
    let pids: Vec<&str> = output
        .split("(pid ")
        .skip(1)
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .collect();
    assert_eq!(pids.len(), 3, "registry and two demo clusters:\n{output}");
    if Path::new("/proc/self").exists() {
        for pid in pids {
            assert!(
                !Path::new("/proc").join(pid).exists(),
                "process {pid} outlived the quickstart:\n{output}"
            );
        }
    }
}

/// The sample repository's configuration is documentation too; it must stay valid: staging is
/// pinned by sync, production promoted into by commit, each verified on its own context (which
/// the quickstart replaces with its demo clusters' kubeconfigs).
#[test]
fn the_sample_gitops_configuration_is_valid() {
    use tagpin::config::{ClusterTarget, WriteMode};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gitops/tagpin.yaml");
    let config = tagpin::config::Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.mode, WriteMode::Commit);
    assert_eq!(config.paths, ["overlays/staging"]);
    let stages = &config.promotion.expect("promotion.stages").stages;
    let summary: Vec<_> = stages
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.paths.clone(),
                s.cluster.clone(),
                s.mode,
                s.soak,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "staging",
                vec!["overlays/staging".to_string()],
                ClusterTarget::Context("staging".into()),
                WriteMode::Commit,
                Duration::ZERO
            ),
            (
                "production",
                vec!["overlays/production".to_string()],
                ClusterTarget::Context("production".into()),
                WriteMode::Commit,
                Duration::ZERO
            ),
        ]
    );
}
