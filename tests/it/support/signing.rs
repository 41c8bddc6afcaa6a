//! Commit signing keys made by the tests (never committed), and the real `git verify-commit`
//! to check what tagpin signed: SSH keys through `gpg.ssh.allowedSignersFile` (git runs
//! `ssh-keygen -Y verify`), OpenPGP keys imported into a GnuPG home of the test's own (git
//! runs `gpg --verify`).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use tempfile::TempDir;

use super::git::git_command;

/// The two formats of `author.signing.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Ssh,
    OpenPgp,
}

impl Format {
    pub const BOTH: [Format; 2] = [Format::Ssh, Format::OpenPgp];

    /// As `author.signing.format` names it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Ssh => "ssh",
            Format::OpenPgp => "openpgp",
        }
    }
}

/// A signing key pair in its own temp dir: the private key file (passphrase-less, or
/// encrypted with [`TestKey::PASSPHRASE`]) and the public key file.
pub struct TestKey {
    pub format: Format,
    pub email: String,
    dir: TempDir,
}

impl TestKey {
    /// The passphrase of keys made by [`TestKey::encrypted`].
    pub const PASSPHRASE: &'static str = "correct horse battery staple";

    pub fn new(format: Format, email: &str) -> TestKey {
        TestKey::make(format, email, None)
    }

    /// A key encrypted with [`TestKey::PASSPHRASE`].
    pub fn encrypted(format: Format, email: &str) -> TestKey {
        TestKey::make(format, email, Some(TestKey::PASSPHRASE))
    }

    fn make(format: Format, email: &str, passphrase: Option<&str>) -> TestKey {
        let dir = tempfile::Builder::new()
            .prefix("tagpin-signing-")
            .tempdir()
            .unwrap();
        let (private, public) = match format {
            Format::Ssh => ssh_pair(email, passphrase),
            Format::OpenPgp => openpgp_pair(email, passphrase),
        };
        let key = TestKey {
            format,
            email: email.to_string(),
            dir,
        };
        std::fs::write(key.private_path(), private).unwrap();
        std::fs::set_permissions(key.private_path(), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::write(key.public_path(), public).unwrap();
        key
    }

    pub fn private_path(&self) -> PathBuf {
        self.dir.path().join("signing-key")
    }

    pub fn public_path(&self) -> PathBuf {
        self.dir.path().join("signing-key.pub")
    }

    pub fn private_text(&self) -> String {
        std::fs::read_to_string(self.private_path()).unwrap()
    }

    pub fn public_text(&self) -> String {
        std::fs::read_to_string(self.public_path()).unwrap()
    }

    /// `author:` of a `tagpin.yaml` signing with this key from its file, as this key's email.
    pub fn author_yaml(&self) -> String {
        format!(
            "author:\n  name: tagpin\n  email: {}\n  signing:\n    format: {}\n    key_file: '{}'\n",
            self.email,
            self.format.name(),
            self.private_path().display()
        )
    }
}

/// An ed25519 key pair in OpenSSH's formats.
fn ssh_pair(email: &str, passphrase: Option<&str>) -> (String, String) {
    let mut key =
        ssh_key::PrivateKey::random(&mut rand_core::OsRng, ssh_key::Algorithm::Ed25519).unwrap();
    key.set_comment(email);
    let public = key.public_key().to_openssh().unwrap();
    let key = match passphrase {
        Some(passphrase) => key.encrypt(&mut rand_core::OsRng, passphrase).unwrap(),
        None => key,
    };
    let private = key.to_openssh(ssh_key::LineEnding::LF).unwrap().to_string();
    (private, public + "\n")
}

/// An ed25519 OpenPGP key (certify and sign) with one user id, armoured.
fn openpgp_pair(email: &str, passphrase: Option<&str>) -> (String, String) {
    use pgp::composed::{ArmorOptions, KeyType, SecretKeyParamsBuilder};
    let mut params = SecretKeyParamsBuilder::default();
    params
        .key_type(KeyType::Ed25519Legacy)
        .can_certify(true)
        .can_sign(true)
        .primary_user_id(format!("tagpin <{email}>"));
    if let Some(passphrase) = passphrase {
        params.passphrase(Some(passphrase.into()));
    }
    let key = params.build().unwrap().generate(rand_core::OsRng).unwrap();
    let public = key.to_public_key();
    (
        key.to_armored_string(ArmorOptions::default()).unwrap(),
        public.to_armored_string(ArmorOptions::default()).unwrap(),
    )
}

/// What `git verify-commit` trusts: an allowed signers file with the SSH keys and a GnuPG
/// home with the OpenPGP keys given.
pub struct Trust {
    dir: TempDir,
}

impl Trust {
    pub fn of(keys: &[&TestKey]) -> Trust {
        let dir = tempfile::Builder::new()
            .prefix("tagpin-trust-")
            .tempdir()
            .unwrap();
        let trust = Trust { dir };
        let gnupg = trust.gnupg_home();
        std::fs::create_dir(&gnupg).unwrap();
        std::fs::set_permissions(&gnupg, std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut signers = String::new();
        for key in keys {
            match key.format {
                Format::Ssh => {
                    signers.push_str(&format!(
                        "{} namespaces=\"git\" {}",
                        key.email,
                        key.public_text()
                    ));
                }
                Format::OpenPgp => {
                    let out = Command::new("gpg")
                        .args(["--batch", "--quiet", "--import"])
                        .arg(key.public_path())
                        .env("GNUPGHOME", &gnupg)
                        .output()
                        .expect("run gpg (is gnupg installed?)");
                    assert!(
                        out.status.success(),
                        "gpg --import: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
        }
        std::fs::write(trust.allowed_signers(), signers).unwrap();
        trust
    }

    pub fn allowed_signers(&self) -> PathBuf {
        self.dir.path().join("allowed_signers")
    }

    pub fn gnupg_home(&self) -> PathBuf {
        self.dir.path().join("gnupg")
    }

    /// `git verify-commit <commit>` in `repo`, as a person who trusts these keys runs it.
    pub fn verify_commit(&self, repo: &Path, commit: &str) -> Output {
        git_command()
            .current_dir(repo)
            .args(["-c"])
            .arg(format!(
                "gpg.ssh.allowedSignersFile={}",
                self.allowed_signers().display()
            ))
            .args(["verify-commit", "--raw", commit])
            .env("GNUPGHOME", self.gnupg_home())
            .stdin(Stdio::null())
            .output()
            .expect("run git verify-commit")
    }

    /// Asserts that git verifies each of `commits` in `repo` with these keys.
    pub fn assert_verified(&self, repo: &Path, commits: &[String]) {
        assert!(!commits.is_empty(), "no commits to verify");
        for commit in commits {
            let out = self.verify_commit(repo, commit);
            assert!(
                out.status.success(),
                "git verify-commit {commit} failed:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// The `pre-receive` hook body that refuses every new commit `git verify-commit` does not
    /// accept with these keys, as branch protection requiring signed commits does.
    pub fn reject_unsigned_hook(&self) -> String {
        format!(
            r#"#!/bin/sh
# Installed by tagpin's test harness (tests/it/support/signing.rs): signed commits required.
zero=0000000000000000000000000000000000000000
status=0
while read -r old new ref; do
  [ "$new" = "$zero" ] && continue
  for commit in $(git rev-list "$new" --not --all); do
    if ! GNUPGHOME='{gnupg}' git -c gpg.ssh.allowedSignersFile='{signers}' verify-commit "$commit" >/dev/null 2>&1; then
      echo "commit $commit on $ref is not signed by a trusted key: unsigned commits are rejected" >&2
      status=1
    fi
  done
done
exit $status
"#,
            gnupg = self.gnupg_home().display(),
            signers = self.allowed_signers().display(),
        )
    }
}
