//! Commit signatures (issue #40): the key tagpin signs its commits with, and the public keys
//! a commit's signature is checked against.
//!
//! Two formats, as git writes them in a commit's `gpgsig` header:
//! - SSH (git's `gpg.format=ssh`): an SSHSIG signature in the `git` namespace, armoured as
//!   `-----BEGIN SSH SIGNATURE-----`, exactly what `ssh-keygen -Y sign -n git` makes and
//!   `git verify-commit` checks against `gpg.ssh.allowedSignersFile`.
//! - OpenPGP: a detached binary-document signature, ASCII armoured, as `gpg --detach-sign`
//!   makes it for git.
//!
//! A [`Signer`] is built and tried once, when the key is read ([`Signer::ssh`],
//! [`Signer::openpgp`]): a wrong passphrase or a key that cannot sign is refused there, before
//! anything is written, and the passphrase is not kept. What a signature says about its signer
//! before it is verified ([`signed_by`]) is only a name for messages, never trusted.

use std::fmt;

use pgp::composed::{
    ArmorOptions, Deserializable as _, DetachedSignature, SignedPublicKey, SignedSecretKey,
};
use pgp::types::{KeyDetails as _, Password};

/// The SSHSIG namespace git signs commits in (`ssh-keygen -Y sign -n git`).
const SSH_NAMESPACE: &str = "git";

/// Why a key cannot be used. Messages never hold key material or the passphrase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    #[error("not {expected}: {message}")]
    Unreadable {
        expected: &'static str,
        message: String,
    },
    #[error("the key is encrypted and no passphrase is given")]
    NeedsPassphrase,
    #[error("the passphrase does not decrypt the key")]
    WrongPassphrase,
    #[error("the key cannot sign: {0}")]
    CannotSign(String),
}

/// A private key that signs commits, decrypted and tried once when read.
pub struct Signer {
    key: SecretKey,
    public: PublicKey,
}

enum SecretKey {
    Ssh(Box<ssh_key::PrivateKey>),
    /// The whole transferable secret key (decrypted) and which of its keys signs: `None`
    /// for the primary key, else the index of a signing subkey.
    OpenPgp(Box<SignedSecretKey>, Option<usize>),
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signer {{ public: {} }}", self.public)
    }
}

impl Signer {
    /// An OpenSSH private key (`-----BEGIN OPENSSH PRIVATE KEY-----`), decrypted with
    /// `passphrase` when it is encrypted, and tried.
    pub fn ssh(text: &[u8], passphrase: Option<&str>) -> Result<Signer, SigningError> {
        let key = ssh_key::PrivateKey::from_openssh(text).map_err(|e| {
            // ssh-key reads only the algorithms it signs with whole (an ECDSA P-521 key's
            // private part fails as "length invalid" or so): named by its public part, such a
            // key is one that cannot sign, not a file that is no key.
            match ssh_algorithm(text) {
                Some(algorithm) if !SSH_SIGNING_ALGORITHMS.contains(&algorithm.as_str()) => {
                    SigningError::CannotSign(format!(
                        "{algorithm} key: tagpin signs with {} keys",
                        SSH_SIGNING_ALGORITHMS.join(", ")
                    ))
                }
                _ => SigningError::Unreadable {
                    expected: "an OpenSSH private key",
                    message: e.to_string(),
                },
            }
        })?;
        let key = if key.is_encrypted() {
            let passphrase = passphrase.ok_or(SigningError::NeedsPassphrase)?;
            key.decrypt(passphrase)
                .map_err(|_| SigningError::WrongPassphrase)?
        } else {
            key
        };
        let public = PublicKey::Ssh(key.public_key().clone());
        Signer::tried(Signer {
            key: SecretKey::Ssh(Box::new(key)),
            public,
        })
    }

    /// An ASCII armoured OpenPGP secret key (`-----BEGIN PGP PRIVATE KEY BLOCK-----`), its
    /// signing key decrypted with `passphrase` when it is encrypted, and tried. The signing
    /// key is the newest subkey whose binding allows signing, else the primary key.
    pub fn openpgp(text: &[u8], passphrase: Option<&str>) -> Result<Signer, SigningError> {
        let (mut key, _) =
            SignedSecretKey::from_armor_single(text).map_err(|e| SigningError::Unreadable {
                expected: "an ASCII armoured OpenPGP secret key",
                message: e.to_string(),
            })?;
        let subkey = key
            .secret_subkeys
            .iter()
            .enumerate()
            .filter(|(_, sub)| sub.signatures.iter().any(|s| s.key_flags().sign()))
            .max_by_key(|(_, sub)| sub.key.public_key().created_at())
            .map(|(i, _)| i);
        let encrypted = match subkey {
            Some(i) => key.secret_subkeys[i].key.secret_params().is_encrypted(),
            None => key.primary_key.secret_params().is_encrypted(),
        };
        if encrypted {
            let password = Password::from(passphrase.ok_or(SigningError::NeedsPassphrase)?);
            let unlocked = match subkey {
                Some(i) => key.secret_subkeys[i].key.remove_password(&password),
                None => key.primary_key.remove_password(&password),
            };
            unlocked.map_err(|_| SigningError::WrongPassphrase)?;
        }
        let public = PublicKey::OpenPgp(Box::new(key.to_public_key()));
        Signer::tried(Signer {
            key: SecretKey::OpenPgp(Box::new(key), subkey),
            public,
        })
    }

    /// `signer` once it has signed a probe that its own public key verifies: an algorithm
    /// the crates read but cannot sign with fails here, not at the first commit.
    fn tried(signer: Signer) -> Result<Signer, SigningError> {
        const PROBE: &[u8] = b"tagpin signing probe\n";
        let signature = signer.sign(PROBE)?;
        if signer.public.verifies(&signature, PROBE) {
            Ok(signer)
        } else {
            Err(SigningError::CannotSign(
                "a probe signature it made does not verify".into(),
            ))
        }
    }

    /// The armoured signature of `data` (a commit without its `gpgsig` header), without a
    /// final newline, as a commit header carries it.
    pub fn sign(&self, data: &[u8]) -> Result<String, SigningError> {
        let cannot = |e: &dyn fmt::Display| SigningError::CannotSign(e.to_string());
        let armoured = match &self.key {
            SecretKey::Ssh(key) => key
                .sign(SSH_NAMESPACE, ssh_key::HashAlg::Sha512, data)
                .and_then(|s| s.to_pem(ssh_key::LineEnding::LF))
                .map_err(|e| cannot(&format!("{} key: {e}", key.algorithm())))?,
            SecretKey::OpenPgp(key, subkey) => {
                let rng = rand_core::OsRng;
                let empty = Password::empty();
                let signature = match subkey {
                    Some(i) => {
                        let sub = &key.secret_subkeys[*i].key;
                        let hash = pgp::types::SigningKey::hash_alg(sub);
                        DetachedSignature::sign_binary_data(rng, sub, &empty, hash, data)
                    }
                    None => {
                        let primary = &key.primary_key;
                        let hash = pgp::types::SigningKey::hash_alg(primary);
                        DetachedSignature::sign_binary_data(rng, primary, &empty, hash, data)
                    }
                };
                signature
                    .and_then(|s| s.to_armored_string(ArmorOptions::default()))
                    .map_err(|e| cannot(&e))?
            }
        };
        Ok(armoured.trim_end().to_string())
    }

    /// The public key of this signer: what verifies its commits.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }
}

/// The SSH key algorithms tagpin signs with (the `ssh-key` features it is built with).
const SSH_SIGNING_ALGORITHMS: [&str; 4] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ssh-rsa",
];

/// The algorithm of an OpenSSH private key file, read from its public part, which is never
/// encrypted (`openssh-key-v1`: magic, cipher, KDF, KDF options, key count, then each public
/// key, whose first string is its algorithm). `None` when the text is no such file.
fn ssh_algorithm(text: &[u8]) -> Option<String> {
    use base64::Engine;
    let text = std::str::from_utf8(text).ok()?;
    let body = text
        .split("-----BEGIN OPENSSH PRIVATE KEY-----")
        .nth(1)?
        .split("-----END OPENSSH PRIVATE KEY-----")
        .next()?;
    let body: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body)
        .ok()?;
    let mut rest = bytes.strip_prefix(b"openssh-key-v1\0")?;
    let (_cipher, _kdf, _options) = (
        take_string(&mut rest)?,
        take_string(&mut rest)?,
        take_string(&mut rest)?,
    );
    if take_u32(&mut rest)? == 0 {
        return None;
    }
    let mut public = take_string(&mut rest)?;
    let name = take_string(&mut public)?;
    Some(String::from_utf8_lossy(name).into_owned())
}

/// A big-endian u32 from the front of `rest` (SSH's `uint32`).
fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let slice: &[u8] = rest;
    let (value, after) = slice.split_first_chunk::<4>()?;
    *rest = after;
    Some(u32::from_be_bytes(*value))
}

/// A length-prefixed byte string from the front of `rest` (SSH's `string`).
fn take_string<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let length = usize::try_from(take_u32(rest)?).ok()?;
    let slice: &'a [u8] = rest;
    let (value, after) = (slice.get(..length)?, slice.get(length..)?);
    *rest = after;
    Some(value)
}

/// A public key commit signatures are checked against: an OpenSSH public key line
/// (`ssh-ed25519 AAAA… comment`, as in `~/.ssh/id_ed25519.pub`) or an ASCII armoured OpenPGP
/// public key (`gpg --armor --export`).
#[derive(Clone)]
pub enum PublicKey {
    Ssh(ssh_key::PublicKey),
    OpenPgp(Box<SignedPublicKey>),
}

impl PartialEq for PublicKey {
    fn eq(&self, other: &PublicKey) -> bool {
        match (self, other) {
            (PublicKey::Ssh(a), PublicKey::Ssh(b)) => a.key_data() == b.key_data(),
            (PublicKey::OpenPgp(a), PublicKey::OpenPgp(b)) => a.fingerprint() == b.fingerprint(),
            _ => false,
        }
    }
}

impl Eq for PublicKey {}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for PublicKey {
    /// `SSH key SHA256:… (comment)`, `OpenPGP key <FINGERPRINT> (user id)`: how messages
    /// name a key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublicKey::Ssh(key) => {
                write!(f, "SSH key {}", key.fingerprint(ssh_key::HashAlg::Sha256))?;
                match key.comment() {
                    "" => Ok(()),
                    comment => write!(f, " ({comment})"),
                }
            }
            PublicKey::OpenPgp(key) => {
                write!(f, "OpenPGP key {:X}", key.fingerprint())?;
                match key.details.users.first() {
                    Some(user) => write!(f, " ({})", String::from_utf8_lossy(user.id.id())),
                    None => Ok(()),
                }
            }
        }
    }
}

impl PublicKey {
    /// Reads either format, told apart by its first line.
    pub fn parse(text: &str) -> Result<PublicKey, SigningError> {
        let text = text.trim();
        if text.starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----") {
            let (key, _) = SignedPublicKey::from_armor_single(text.as_bytes()).map_err(|e| {
                SigningError::Unreadable {
                    expected: "an ASCII armoured OpenPGP public key",
                    message: e.to_string(),
                }
            })?;
            return Ok(PublicKey::OpenPgp(Box::new(key)));
        }
        ssh_key::PublicKey::from_openssh(text)
            .map(PublicKey::Ssh)
            .map_err(|e| SigningError::Unreadable {
                expected: "an OpenSSH public key line or an ASCII armoured OpenPGP public key",
                message: e.to_string(),
            })
    }

    /// Whether `signature` (armoured, as a `gpgsig` header holds it) is this key's signature
    /// of `data`. Any signature of the other format, or one that cannot be read, is not.
    pub fn verifies(&self, signature: &str, data: &[u8]) -> bool {
        match self {
            PublicKey::Ssh(key) => ssh_key::SshSig::from_pem(signature.trim().as_bytes())
                .is_ok_and(|sig| key.verify(SSH_NAMESPACE, data, &sig).is_ok()),
            PublicKey::OpenPgp(key) => {
                let Ok((sig, _)) = DetachedSignature::from_armor_single(signature.as_bytes())
                else {
                    return false;
                };
                let primary = sig.verify(&key.primary_key, data).is_ok();
                primary
                    || key
                        .public_subkeys
                        .iter()
                        .any(|sub| sig.verify(&sub.key, data).is_ok())
            }
        }
    }
}

/// Who a signature says made it, for messages only (nothing is verified): the SSH key's
/// fingerprint, or the OpenPGP issuer's fingerprint or key id. `None` for what cannot be read.
pub fn signed_by(signature: &str) -> Option<String> {
    let signature = signature.trim();
    if signature.starts_with("-----BEGIN SSH SIGNATURE-----") {
        let sig = ssh_key::SshSig::from_pem(signature.as_bytes()).ok()?;
        let key = ssh_key::PublicKey::new(sig.public_key().clone(), "");
        return Some(format!(
            "SSH key {}",
            key.fingerprint(ssh_key::HashAlg::Sha256)
        ));
    }
    let (sig, _) = DetachedSignature::from_armor_single(signature.as_bytes()).ok()?;
    if let Some(fingerprint) = sig.signature.issuer_fingerprint().first() {
        return Some(format!("OpenPGP key {fingerprint:X}"));
    }
    let id = sig.signature.issuer_key_id().first().map(|id| {
        id.as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<String>()
    })?;
    Some(format!("OpenPGP key id {id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssh_key(passphrase: Option<&str>) -> String {
        let key = ssh_key::PrivateKey::random(&mut rand_core::OsRng, ssh_key::Algorithm::Ed25519)
            .unwrap();
        let key = match passphrase {
            Some(p) => key.encrypt(&mut rand_core::OsRng, p).unwrap(),
            None => key,
        };
        key.to_openssh(ssh_key::LineEnding::LF).unwrap().to_string()
    }

    fn openpgp_key(passphrase: Option<&str>) -> String {
        use pgp::composed::{KeyType, SecretKeyParamsBuilder};
        let mut params = SecretKeyParamsBuilder::default();
        params
            .key_type(KeyType::Ed25519Legacy)
            .can_certify(true)
            .can_sign(true)
            .primary_user_id("tagpin <tagpin@example.com>".into());
        if let Some(p) = passphrase {
            params.passphrase(Some(p.into()));
        }
        let key = params.build().unwrap().generate(rand_core::OsRng).unwrap();
        key.to_armored_string(ArmorOptions::default()).unwrap()
    }

    #[test]
    fn a_signature_verifies_with_the_signer_s_key_only() {
        for (format, key, other) in [
            ("ssh", ssh_key(None), ssh_key(None)),
            ("openpgp", openpgp_key(None), openpgp_key(None)),
        ] {
            let signer = |text: &str| match format {
                "ssh" => Signer::ssh(text.as_bytes(), None).unwrap(),
                _ => Signer::openpgp(text.as_bytes(), None).unwrap(),
            };
            let (signer, other) = (signer(&key), signer(&other));
            let data = b"tree 0000\n\nPin web\n";
            let signature = signer.sign(data).unwrap();
            assert!(!signature.ends_with('\n'), "{format}");
            assert!(signer.public().verifies(&signature, data), "{format}");
            assert!(!signer
                .public()
                .verifies(&signature, b"tree 0000\n\nPin db\n"));
            assert!(!other.public().verifies(&signature, data), "{format}");
            let by = signed_by(&signature).unwrap();
            assert!(
                signer.public().to_string().starts_with(&by),
                "{format}: {by} / {}",
                signer.public()
            );
        }
    }

    #[test]
    fn an_encrypted_key_needs_its_passphrase() {
        let ssh = ssh_key(Some("open sesame"));
        let pgp = openpgp_key(Some("open sesame"));
        for (name, read) in [
            ("ssh", Signer::ssh as fn(&[u8], Option<&str>) -> _),
            ("openpgp", Signer::openpgp),
        ] {
            let text = if name == "ssh" { &ssh } else { &pgp };
            assert!(read(text.as_bytes(), Some("open sesame")).is_ok(), "{name}");
            assert_eq!(
                read(text.as_bytes(), Some("wrong")).unwrap_err(),
                SigningError::WrongPassphrase,
                "{name}"
            );
            assert_eq!(
                read(text.as_bytes(), None).unwrap_err(),
                SigningError::NeedsPassphrase,
                "{name}"
            );
        }
    }

    #[test]
    fn a_key_of_the_other_format_or_a_public_key_is_not_a_signing_key() {
        let ssh = ssh_key(None);
        let pgp = openpgp_key(None);
        assert!(matches!(
            Signer::ssh(pgp.as_bytes(), None),
            Err(SigningError::Unreadable { .. })
        ));
        assert!(matches!(
            Signer::openpgp(ssh.as_bytes(), None),
            Err(SigningError::Unreadable { .. })
        ));
        let public = Signer::ssh(ssh.as_bytes(), None).unwrap();
        let PublicKey::Ssh(line) = public.public() else {
            panic!()
        };
        let line = line.to_openssh().unwrap();
        assert!(Signer::ssh(line.as_bytes(), None).is_err());
        assert_eq!(&PublicKey::parse(&line).unwrap(), public.public());
    }

    /// An OpenSSH private key file laid out as `ssh-keygen` writes it, with the public part
    /// of an `algorithm` key and a private part no reader takes.
    fn ssh_file_of(algorithm: &str) -> String {
        use base64::Engine;
        let string = |bytes: &[u8]| {
            let mut out = u32::try_from(bytes.len()).unwrap().to_be_bytes().to_vec();
            out.extend_from_slice(bytes);
            out
        };
        let mut public = string(algorithm.as_bytes());
        public.extend(string(b"nistp521"));
        public.extend(string(&[4; 133]));
        let mut file = b"openssh-key-v1\0".to_vec();
        for part in [&b"none"[..], b"none", b""] {
            file.extend(string(part));
        }
        file.extend(1u32.to_be_bytes());
        file.extend(string(&public));
        file.extend(string(&[7; 40]));
        let body = base64::engine::general_purpose::STANDARD.encode(file);
        format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n")
    }

    #[test]
    fn a_key_of_an_algorithm_tagpin_cannot_sign_with_is_named_by_its_algorithm() {
        let p521 = ssh_file_of("ecdsa-sha2-nistp521");
        assert_eq!(
            ssh_algorithm(p521.as_bytes()).as_deref(),
            Some("ecdsa-sha2-nistp521")
        );
        match Signer::ssh(p521.as_bytes(), None) {
            Err(SigningError::CannotSign(why)) => {
                assert!(
                    why.starts_with("ecdsa-sha2-nistp521 key: tagpin signs with"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        // A readable key's algorithm is read the same way; a damaged file of a signing
        // algorithm stays a file that is no key.
        assert_eq!(
            ssh_algorithm(ssh_key(None).as_bytes()).as_deref(),
            Some("ssh-ed25519")
        );
        let ed25519 = ssh_file_of("ssh-ed25519");
        assert!(matches!(
            Signer::ssh(ed25519.as_bytes(), None),
            Err(SigningError::Unreadable { .. })
        ));
        assert_eq!(ssh_algorithm(b"not a key"), None);
    }
}
