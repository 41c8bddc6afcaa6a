//! The rule types of `images.signatures` (and the signers of `images.provenance`), as the
//! validated configuration holds them: what the signature gate compiles into its [`Trust`].
//! They live here, with the gate that reads them, so the gate needs nothing of `config`;
//! `config` re-exports them as part of its vocabulary (`crate::config::SignatureRule`).
//!
//! [`Trust`]: super::Trust

/// One `images.signatures` entry: a glob over the image name (the same rules as
/// `images.policies`) and who may sign its digests. Key files are read at load, so a missing
/// or malformed key is a configuration error rather than a refusal in the middle of a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureRule {
    pub matches: String,
    /// PEM public keys, as written (relative to the configuration file) with their contents.
    pub keys: Vec<SignatureKey>,
    /// Fulcio certificate identities, any one of which suffices.
    pub keyless: Vec<KeylessIdentity>,
    /// A Sigstore `trusted_root.json` (path as written and contents); `None` means the
    /// public-good instance's, shipped with the `sigstore-trust-root` crate.
    pub trusted_root: Option<SignatureFile>,
    /// Notation (Notary Project) signers: a trust store and identities. Only
    /// `images.signatures` entries have it; `None` elsewhere.
    pub notation: Option<NotationRule>,
}

/// The `notation` of an `images.signatures` entry: the certificates a Notation signature's
/// chain must lead to, and the signing certificate subjects accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotationRule {
    /// PEM files of CA certificates, as written with their contents (in a PinnedRepository,
    /// keys of the `secret_ref` Secret, read by the operator).
    pub trust_store: Vec<SignatureFile>,
    /// Trust policy identities: `*`, or `x509.subject: C=US, ST=WA, O=acme, CN=signer`.
    pub identities: Vec<String>,
}

/// A public key file of an `images.signatures` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureKey {
    /// As written in the configuration (`keys/release.pub`): what reports name.
    pub path: String,
    /// The PEM text, read at load and checked to be a public key.
    pub pem: String,
}

/// A file an `images.signatures` entry names, as written, with its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureFile {
    pub path: String,
    pub contents: String,
}

/// A keyless signer: the OIDC issuer (exact) and a regex over the certificate's subject
/// (its first URI or email SAN), anchored at both ends when compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeylessIdentity {
    pub issuer: String,
    pub subject: String,
}
