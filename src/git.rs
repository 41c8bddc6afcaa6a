//! The Git adapter: a local bare mirror of the GitOps repository, read and written through
//! git2 without ever checking out a working tree.
//!
//! Files are read straight from the tree of the target branch's tip, and a new commit is built
//! by replacing blobs in that tree, so tagpin never writes into (or follows a symlink out of) a
//! directory on disk: a symlink in the repository is a blob holding a path, and is skipped.
//! The mirror lives in a cache directory and is fetched, not cloned, on every pass. It is only
//! a cache: one found damaged (a missing or corrupt object, ref or config) is moved aside and
//! cloned again ([`Mirror::repair`]), and nothing is read from it in part ([`damage`]).
//!
//! The mirror holds the manifests of a repository that may be private, so the cache directory
//! tagpin creates and every mirror in it are `0700`. Writes to a mirror (fetches, the push
//! ref) are made under an advisory lock on a file beside it ([`MirrorLock`]), so that lock
//! files git leaves behind when a process dies mid-write can be told from live ones and
//! removed: a crash never blocks the passes after it.

use std::cell::{Cell, Ref, RefCell};
use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{
    Direction, FetchOptions, FileMode, ObjectType, Oid, PushOptions, RemoteCallbacks, Repository,
};
use sha2::{Digest as _, Sha256};
use std::sync::Arc;

use crate::signing::Signer;

pub mod notes;

use crate::manifest::{FileFilter, ManifestError, MAX_FILE_BYTES};
use crate::pipeline::{Gathered, SkipWhy, Skipped, SourceFile};
use crate::render::Lookup;

/// Credentials for the remote, resolved from the configuration (secrets already read).
#[derive(Clone)]
pub enum Credentials {
    None,
    /// HTTPS Basic: a username and a token used as the password.
    Token {
        username: String,
        token: String,
    },
    SshKey {
        key_file: PathBuf,
        passphrase: Option<String>,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Token { username, .. } => {
                write!(f, "Token {{ username: {username:?}, token: <redacted> }}")
            }
            Credentials::SshKey { key_file, .. } => {
                write!(f, "SshKey {{ key_file: {key_file:?} }}")
            }
        }
    }
}

/// A failed Git operation; messages name the remote (credentials removed) and the branch.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git mirror {}: {message}", path.display())]
    Mirror { path: PathBuf, message: String },
    #[error("cannot fetch from {url}: {message}")]
    Fetch { url: String, message: String },
    #[error("{url}: authentication failed ({message})")]
    Auth { url: String, message: String },
    #[error("{url}: branch {branch:?} does not exist on the remote")]
    BranchMissing { url: String, branch: String },
    #[error("{url}: push to {branch} was rejected: {reason}")]
    Rejected {
        url: String,
        branch: String,
        reason: String,
    },
    #[error("{url}: {branch} moved on the remote since it was fetched (push rejected as non-fast-forward)")]
    NonFastForward { url: String, branch: String },
    #[error("{url}: {branch} was changed by someone else since tagpin last pushed it (expected {expected}, found {found}); not overwriting")]
    LeaseBroken {
        url: String,
        branch: String,
        expected: String,
        found: String,
    },
    #[error("cannot push to {url}: {message}")]
    Push { url: String, message: String },
    #[error("{url}: the repository is larger than the {} limit ({} fetched so far); refused", crate::bounded::size_text(usize::try_from(*limit).unwrap_or(usize::MAX)), approximate_size(*size))]
    TooLarge { url: String, limit: u64, size: u64 },
    #[error("{url}: the fetch did not finish within {}s; stopped", within.as_secs())]
    FetchDeadline { url: String, within: Duration },
    /// The mirror could not be read whole: an object, a ref or its configuration is missing
    /// or corrupt ([`Damage`]). It is only a cache of the remote: [`Mirror::repair`] moves it
    /// aside and clones it again.
    #[error("git mirror {} (a cache of {url}) is damaged: {damage}: {message}", path.display())]
    Damaged {
        path: PathBuf,
        url: String,
        damage: Damage,
        message: String,
    },
    /// The same damage in a mirror cloned afresh from the remote: what is missing or corrupt
    /// is what the remote sent.
    #[error("{url}: the repository cannot be read whole even in a fresh clone ({damage}: {message}); the remote itself is damaged or incomplete")]
    RemoteDamaged {
        url: String,
        damage: Damage,
        message: String,
    },
    /// A commit could not be signed with `author.signing`'s key (which signed when it was
    /// read: see [`Signer`]).
    #[error("cannot sign a commit with author.signing's key: {0}")]
    Sign(#[from] crate::signing::SigningError),
    #[error("git: {0}")]
    Other(String),
}

impl GitError {
    /// The damage this error found in the local mirror, if it is one that moving the mirror
    /// aside and cloning it again can cure.
    pub fn damage(&self) -> Option<Damage> {
        match self {
            GitError::Damaged { damage, .. } => Some(*damage),
            _ => None,
        }
    }

    /// This error as met on a mirror cloned afresh: damage found there is the remote's, and
    /// the message names the remote instead of the cache. Other errors are returned as they
    /// are.
    pub(crate) fn in_fresh_clone(self) -> GitError {
        match self {
            GitError::Damaged {
                url,
                damage,
                message,
                ..
            } => GitError::RemoteDamaged {
                url,
                damage,
                message,
            },
            other => other,
        }
    }
}

/// What is wrong with a damaged mirror, as the failing read or fetch found it. A node that
/// crashed, a disk that filled up or a fetch that was killed leaves one of these behind, and
/// libgit2 then fails every read that meets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// An object a ref reaches is not in the object database: a loose object removed, or a
    /// pack whose index is gone or that no longer matches its index.
    MissingObject,
    /// An object or pack is there but cannot be read: a zlib stream cut short, a hash that
    /// does not match, a corrupt pack or pack index, a loose object's header unreadable. (Also
    /// a missing object that libgit2 reports without its code, as a lookup by path does.)
    CorruptObject,
    /// A ref or the `packed-refs` file cannot be parsed.
    Reference,
    /// The mirror's `config` cannot be parsed.
    Config,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Damage::MissingObject => "missing object",
            Damage::CorruptObject => "unreadable object or pack",
            Damage::Reference => "unreadable ref",
            Damage::Config => "unreadable config",
        })
    }
}

/// Whether a libgit2 error met reading or fetching a mirror means the mirror is damaged, and
/// how; by libgit2's error class and code, never its wording.
///
/// `must_exist` says whether the object asked for is one the mirror must hold (reached from
/// one of its refs); an id that came from elsewhere (a person, a forge, a cluster) may just
/// not be fetched yet, and its absence is no damage. Locks, races, invalid names and the
/// network are never damage. Errors of the `Index` class are not either: a bare mirror has no
/// index file, and a pack index's damage is reported in the `Odb` class.
pub fn damage(class: git2::ErrorClass, code: git2::ErrorCode, must_exist: bool) -> Option<Damage> {
    use git2::{ErrorClass, ErrorCode};
    match (class, code) {
        // A prefix a person gave that names several objects.
        (_, ErrorCode::Ambiguous) => None,
        (ErrorClass::Odb, ErrorCode::NotFound) if must_exist => Some(Damage::MissingObject),
        (ErrorClass::Odb, ErrorCode::NotFound) => None,
        (ErrorClass::Odb | ErrorClass::Zlib, _) => Some(Damage::CorruptObject),
        // A loose object whose header cannot be parsed (found by its id, so its content is
        // the mirror's own), or a commit that cannot be parsed.
        (ErrorClass::Object, ErrorCode::GenericError) => Some(Damage::CorruptObject),
        // "corrupted loose reference file", "corrupted packed references file"; a missing
        // ref, a lock held or lost and a bad name have codes of their own.
        (ErrorClass::Reference, ErrorCode::GenericError) => Some(Damage::Reference),
        (ErrorClass::Config, code) if code != ErrorCode::NotFound => Some(Damage::Config),
        _ => None,
    }
}

/// How long libgit2 waits to connect to a remote, and for each read or write on the
/// connection once connected: a remote that stops answering fails the pass instead of hanging
/// it, while a large but moving transfer is never cut.
pub(crate) const CONNECT_TIMEOUT_MS: i32 = 15_000;
pub(crate) const IO_TIMEOUT_MS: i32 = 60_000;

/// Sets libgit2's network timeouts ([`CONNECT_TIMEOUT_MS`], [`IO_TIMEOUT_MS`]).
///
/// # Safety
/// libgit2 keeps these in unsynchronized globals: call this before any thread is started (the
/// binary does, before it builds the async runtime).
pub unsafe fn set_network_timeouts() -> Result<(), GitError> {
    git2::opts::set_server_connect_timeout_in_milliseconds(CONNECT_TIMEOUT_MS).map_err(other)?;
    git2::opts::set_server_timeout_in_milliseconds(IO_TIMEOUT_MS).map_err(other)
}

/// Runs blocking libgit2 work (fetch, tree reads, commits, pushes) without stalling the async
/// runtime: on a multi-threaded runtime the worker hands its other tasks (the controller's HTTP
/// server, webhooks) to another thread for the duration. `block_in_place` rather than
/// `spawn_blocking`, because a [`Mirror`] holds a `Repository`, which is not `Sync`, and is
/// borrowed, not owned, by its callers.
pub(crate) fn off_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// The mode of the cache directory tagpin creates and of each mirror in it: only the user
/// running tagpin may read the manifests a mirror holds.
pub(crate) const PRIVATE_DIR_MODE: u32 = 0o700;

/// How long a write to a mirror waits for another user of it (a second tagpin process on the
/// same cache directory, or the verifier of this one) to finish writing before failing.
pub(crate) const MIRROR_LOCK_WAIT: Duration = Duration::from_secs(600);
const MIRROR_LOCK_POLL: Duration = Duration::from_millis(50);

/// The trailer ending the message of every commit tagpin writes on its own branches: the id
/// of the tree it wrote. See [`Mirror::is_own_commit`].
pub(crate) const TREE_TRAILER: &str = "Tagpin-Tree";

/// `message` with the [`TREE_TRAILER`] naming `tree`: the message of every commit tagpin
/// writes as its own, made here or on the forge's side.
pub(crate) fn owned_message(message: &str, tree: Oid) -> String {
    format!("{}\n\n{TREE_TRAILER}: {tree}\n", message.trim_end())
}

/// [`Mirror::forge_parts`]: a commit's trees, and each file's mode in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ForgeParts {
    pub base_tree: Oid,
    pub tree: Oid,
    pub executable: Vec<bool>,
}

/// Files by path with their content, as a commit writes them.
pub type Files = Vec<(PathBuf, Vec<u8>)>;

/// Files a commit changed, by path, with their content before and after.
pub(crate) type Changed = Vec<(PathBuf, Vec<u8>, Vec<u8>)>;

/// A local bare mirror of one remote.
///
/// The repository handle is replaced when the mirror is repaired ([`Mirror::repair`]): the
/// sync, promotion and verification of a pass share one `&Mirror`, and all of them must read
/// the fresh clone afterwards. libgit2 keeps the packs it opened mapped, so a new handle is
/// the only way to stop reading a damaged one.
pub struct Mirror {
    repo: RefCell<Repository>,
    /// The mirror's directory.
    path: PathBuf,
    url: String,
    credentials: Credentials,
    /// The file [`MirrorLock`] locks, beside the mirror in the cache directory.
    lock_path: PathBuf,
    limits: FetchLimits,
    /// Device and inode of the directory this handle opened: when another process sharing
    /// the cache directory has repaired the mirror since, it is another directory.
    opened: Cell<Option<(u64, u64)>>,
    /// Repairs made through this handle and not yet counted ([`Mirror::take_repairs`]).
    repairs: Cell<u64>,
    /// Ref listings and fetches made through this handle and not yet counted
    /// ([`Mirror::take_transfers`]).
    transfers: Cell<Transfers>,
    /// What the last ref listing through this handle advertised for `refs/notes/tagpin`
    /// (`Some(None)`: no notes ref), until [`Mirror::fetch_notes`] uses it: a notes ref that
    /// did not move is not fetched.
    advertised_notes: Cell<Option<Option<Oid>>>,
    /// `author.signing`: signs every commit this mirror builds, and is the only key whose
    /// signature makes a commit tagpin's own ([`Mirror::is_trusted`]).
    signer: Option<Arc<Signer>>,
}

/// What a mirror asked its remote: ref listings (what `git ls-remote` asks) and fetches, for
/// `tagpin_git_ref_listings_total` and `tagpin_git_fetches_total`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Transfers {
    pub ref_listings: u64,
    pub fetches: u64,
}

/// Bounds on what a fetch may bring and how long it may take, for a repository someone else
/// chose (the operator's tenants): libgit2's own timeouts are per read, and a remote that
/// keeps sending would otherwise fill the disk.
#[derive(Debug, Clone, Copy, Default)]
pub struct FetchLimits {
    /// The mirror's objects, what it held before plus what a fetch brings, may not exceed
    /// this many bytes.
    pub max_bytes: Option<u64>,
    /// A fetch still transferring at this instant is stopped.
    pub deadline: Option<(Instant, Duration)>,
}

/// `1.5 GiB`, `12.0 MiB`, `512 B`: a size measured, for messages.
pub(crate) fn approximate_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            // Shown to one decimal; the exact value is not the point of the message.
            #[allow(clippy::cast_precision_loss)]
            return format!("{:.1} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} B")
}

/// The bytes the files under `dir` take (not following symlinks); what cannot be read counts
/// as nothing.
fn dir_bytes(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .sum()
}

/// An exclusive advisory lock (`flock`) on one mirror, held while tagpin writes to it and
/// released when dropped, or by the kernel when the process dies. Every write to a mirror
/// holds it, so whoever holds it knows that any git `*.lock` file in the mirror was left by a
/// process that stopped mid-write, and may remove it. It also keeps two fetches into one
/// mirror from failing on each other's lock files.
struct MirrorLock {
    _file: File,
}

impl MirrorLock {
    /// Waits up to [`MIRROR_LOCK_WAIT`] for the lock on `path` (created `0600` if missing).
    fn acquire(path: &Path) -> Result<MirrorLock, GitError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| mirror_error(path, e.to_string()))?;
        let deadline = Instant::now() + MIRROR_LOCK_WAIT;
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(MirrorLock { _file: file }),
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    if !told {
                        tracing::info!(
                            "{}: another process is writing to this git mirror; waiting",
                            path.display()
                        );
                        told = true;
                    }
                    std::thread::sleep(MIRROR_LOCK_POLL);
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(mirror_error(
                        path,
                        format!(
                            "another process has held the mirror's lock for over {}s",
                            MIRROR_LOCK_WAIT.as_secs()
                        ),
                    ))
                }
                Err(TryLockError::Error(e)) => return Err(mirror_error(path, e.to_string())),
            }
        }
    }
}

const REMOTE_PREFIX: &str = "refs/remotes/origin/";
/// The local ref a commit is pushed from: libgit2 pushes references, not bare object ids.
const PUSH_REF: &str = "refs/tagpin/push";

impl Mirror {
    /// The mirror's directory.
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// Opens the mirror of `url` under `cache_dir`, creating both the first time (`0700`).
    ///
    /// A mirror left readable by others is tightened to `0700`; one that is no longer a
    /// repository is moved aside and re-created (it is only a cache: the next fetch fills it
    /// again), which counts as a repair; lock files a killed process left in it are removed.
    /// Each is logged.
    pub fn open(cache_dir: &Path, url: &str, credentials: Credentials) -> Result<Mirror, GitError> {
        prepare_cache_dir(cache_dir)?;
        let name = mirror_dir_name(url);
        let path = cache_dir.join(&name);
        let lock_path = cache_dir.join(format!("{name}.flock"));
        let lock = MirrorLock::acquire(&lock_path)?;
        let (repo, replaced) = open_or_create(&path, url)?;
        remove_stale_locks(repo.path());
        drop(lock);
        Ok(Mirror {
            repo: RefCell::new(repo),
            opened: Cell::new(dir_identity(&path)),
            path,
            url: url.to_string(),
            credentials,
            lock_path,
            limits: FetchLimits::default(),
            repairs: Cell::new(u64::from(replaced)),
            transfers: Cell::default(),
            advertised_notes: Cell::default(),
            signer: None,
        })
    }

    /// The repository, for one operation. Borrowed, never kept: [`Mirror::repair`] replaces
    /// it between operations.
    fn repo(&self) -> Ref<'_, Repository> {
        self.repo.borrow()
    }

    /// Signs every commit this mirror builds from now on with `signer`, and trusts as
    /// tagpin's own only the commits its key signed ([`Mirror::is_trusted`]).
    pub fn sign_with(&mut self, signer: Arc<Signer>) {
        self.signer = Some(signer);
    }

    /// Whether commits are signed, and trusted by their signature.
    pub fn signs(&self) -> bool {
        self.signer.is_some()
    }

    /// Bounds every later fetch into this mirror by `limits`.
    pub fn limit(&mut self, limits: FetchLimits) {
        self.limits = limits;
    }

    /// Removes a mirror that grew past its size limit: it is only a cache, and keeping it
    /// would keep the disk it took. The whole directory, so that the next open creates it
    /// afresh rather than finding a damaged mirror and counting a repair.
    fn discard(&self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!("{}: cannot remove: {e}", self.path.display());
        }
    }

    /// The remote URL with any userinfo removed, for messages.
    pub(crate) fn display_url(&self) -> String {
        redact_url(&self.url)
    }

    /// The ref listings and fetches made through this handle since the last call.
    pub(crate) fn take_transfers(&self) -> Transfers {
        self.transfers.take()
    }

    /// The repairs made through this handle since the last call (the one [`Mirror::open`]
    /// made included), for `tagpin_mirror_repairs_total`.
    pub fn take_repairs(&self) -> u64 {
        self.repairs.replace(0)
    }

    /// Cures a mirror `found` showed damaged: moves it aside (to `<mirror>.damaged`, replacing
    /// the one an earlier repair left there), creates it anew and fetches `branch` and the
    /// branches under `prefix` into it, all under the mirror's lock. The caller then reads
    /// again, once: damage in the fresh clone is the remote's ([`GitError::in_fresh_clone`]).
    ///
    /// Another process sharing the cache directory may have read the damaged mirror too: the
    /// first to take the lock repairs it, and the others find a directory other than the one
    /// they opened, so they open the fresh clone and fetch into it instead of moving it aside
    /// again. A mirror that holds no object is not moved either: the damage came with the
    /// fetch, from the remote. An error that is not damage is returned as it is.
    pub fn repair(&self, found: GitError, branch: &str, prefix: &str) -> Result<(), GitError> {
        if found.damage().is_none() {
            return Err(found);
        }
        let lock = MirrorLock::acquire(&self.lock_path)?;
        let started = Instant::now();
        let current = dir_identity(&self.path);
        if current.is_some() && current != self.opened.get() {
            tracing::info!(
                "git mirror {}: another process has replaced it since this one read it ({found}); reading the new one",
                self.path.display()
            );
            self.replace_handle(open_bare(&self.path)?)?;
        } else if current.is_some() && self.holds_nothing() {
            return Err(found.in_fresh_clone());
        } else {
            let aside = match current {
                Some(_) => format!("moved it aside to {}", move_aside(&self.path)?.display()),
                None => "its directory is gone".to_string(),
            };
            tracing::warn!(
                "{found}; {aside}, cloning {} again (the mirror is only a cache)",
                self.display_url()
            );
            self.replace_handle(create_mirror(&self.path)?)?;
            self.repairs.set(self.repairs.get() + 1);
        }
        self.fetch_locked(&lock, branch, Some(prefix))
            .map_err(GitError::in_fresh_clone)?;
        tracing::info!(
            "git mirror {}: fetched {} again in {} ms",
            self.path.display(),
            self.display_url(),
            started.elapsed().as_millis()
        );
        Ok(())
    }

    /// Reads through `repo` from now on.
    fn replace_handle(&self, repo: Repository) -> Result<(), GitError> {
        let mut current = self.repo.try_borrow_mut().map_err(|_| {
            mirror_error(
                &self.path,
                "cannot replace the repository while it is being read".into(),
            )
        })?;
        *current = repo;
        self.opened.set(dir_identity(&self.path));
        Ok(())
    }

    /// Whether the mirror holds no object at all (a pack, or a loose object): nothing was
    /// ever fetched into it. Told from the files, since what libgit2 cannot read it skips.
    fn holds_nothing(&self) -> bool {
        let objects = self.path.join("objects");
        let entries = |dir: &Path| -> Vec<String> {
            std::fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let packs = entries(&objects.join("pack"))
            .iter()
            .any(|name| name.ends_with(".pack") || name.ends_with(".idx"));
        let loose = entries(&objects).iter().any(|name| {
            name.len() == 2
                && name.bytes().all(|b| b.is_ascii_hexdigit())
                && !entries(&objects.join(name)).is_empty()
        });
        !packs && !loose
    }

    /// Fetches `branch` and every branch under `prefix` (tagpin's own), pruning deleted ones.
    pub fn fetch(&self, branch: &str, prefix: &str) -> Result<(), GitError> {
        let lock = MirrorLock::acquire(&self.lock_path)?;
        self.fetch_locked(&lock, branch, Some(prefix))
    }

    /// Fetches `branch` alone: what a commit made on the forge's side (`forge.api_commits`)
    /// left there, so that the rest of the pass reads it from the mirror.
    pub(crate) fn fetch_branch(&self, branch: &str) -> Result<(), GitError> {
        let lock = MirrorLock::acquire(&self.lock_path)?;
        self.fetch_locked(&lock, branch, None)
    }

    /// [`Mirror::fetch`], with the mirror's lock held by the caller; `prefix`: tagpin's own
    /// branches too.
    fn fetch_locked(
        &self,
        _lock: &MirrorLock,
        branch: &str,
        prefix: Option<&str>,
    ) -> Result<(), GitError> {
        let repo = self.repo();
        // Another process sharing the cache directory may have died mid-write since the open.
        remove_stale_locks(repo.path());
        let mut refspecs = vec![format!("+refs/heads/{branch}:{REMOTE_PREFIX}{branch}")];
        if let Some(prefix) = prefix {
            refspecs.push(format!("+refs/heads/{prefix}*:{REMOTE_PREFIX}{prefix}*"));
        }
        let mut remote = repo
            .remote_anonymous(&self.url)
            .map_err(|e| self.fetch_error(e))?;
        if self.tips_unchanged(&repo, &mut remote, branch, prefix) {
            return Ok(());
        }
        self.count(|t| t.fetches += 1);
        let attempts = Cell::new(0);
        let stopped = Cell::new(None);
        let held = match self.limits.max_bytes {
            Some(_) => dir_bytes(&repo.path().join("objects")),
            None => 0,
        };
        let mut callbacks = self.callbacks(&attempts);
        let limits = self.limits;
        callbacks.transfer_progress(|progress| {
            let size = held.saturating_add(u64::try_from(progress.received_bytes()).unwrap_or(0));
            let why = match limits {
                FetchLimits {
                    max_bytes: Some(max),
                    ..
                } if size > max => Some(Stop::TooLarge(size)),
                FetchLimits {
                    deadline: Some((at, _)),
                    ..
                } if Instant::now() >= at => Some(Stop::Deadline),
                _ => None,
            };
            stopped.set(why);
            why.is_none()
        });
        let mut options = FetchOptions::new();
        options.remote_callbacks(callbacks);
        options.prune(git2::FetchPrune::On);
        let fetched = remote.fetch(&refspecs, Some(&mut options), None);
        let size = match self.limits.max_bytes {
            Some(_) if fetched.is_ok() => dir_bytes(&repo.path().join("objects")),
            _ => 0,
        };
        match (stopped.get(), self.limits) {
            (
                Some(Stop::TooLarge(size)),
                FetchLimits {
                    max_bytes: Some(limit),
                    ..
                },
            ) => {
                self.discard();
                return Err(self.too_large(limit, size));
            }
            (
                Some(Stop::Deadline),
                FetchLimits {
                    deadline: Some((_, within)),
                    ..
                },
            ) => {
                return Err(GitError::FetchDeadline {
                    url: self.display_url(),
                    within,
                });
            }
            (
                _,
                FetchLimits {
                    max_bytes: Some(limit),
                    ..
                },
            ) if size > limit => {
                // A limit lowered since the mirror was filled, or a transport that reports
                // no progress.
                self.discard();
                return Err(self.too_large(limit, size));
            }
            _ => {}
        }
        fetched.map_err(|e| self.fetch_error(e))?;
        // An anonymous remote does not prune; drop tracking refs the remote no longer has.
        let advertised: Vec<String> = remote
            .list()
            .map(|heads| heads.iter().map(|h| h.name().to_string()).collect())
            .unwrap_or_default();
        if let Some(prefix) = prefix {
            self.prune_missing(&advertised, prefix);
        }
        Ok(())
    }

    fn prune_missing(&self, advertised: &[String], prefix: &str) {
        let repo = self.repo();
        let Ok(refs) = repo.references_glob(&format!("{REMOTE_PREFIX}{prefix}*")) else {
            return;
        };
        let names: Vec<String> = refs
            .flatten()
            .filter_map(|r| r.name().map(str::to_string))
            .collect();
        for name in names {
            let head = format!("refs/heads/{}", &name[REMOTE_PREFIX.len()..]);
            if !advertised.contains(&head) {
                if let Ok(mut r) = repo.find_reference(&name) {
                    let _ = r.delete();
                }
            }
        }
    }

    /// The fetched tip of a remote branch.
    pub fn tip(&self, branch: &str) -> Option<Oid> {
        self.repo()
            .find_reference(&format!("{REMOTE_PREFIX}{branch}"))
            .ok()
            .and_then(|r| r.target())
    }

    /// Like [`Mirror::tip`], but a missing branch is an error naming it, and a ref that
    /// cannot be read is damage.
    pub fn require_tip(&self, branch: &str) -> Result<Oid, GitError> {
        let missing = || GitError::BranchMissing {
            url: self.display_url(),
            branch: branch.to_string(),
        };
        let name = format!("{REMOTE_PREFIX}{branch}");
        match self.repo().find_reference(&name) {
            Ok(reference) => reference.target().ok_or_else(missing),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Err(missing()),
            Err(e) => Err(self.read_error_at(&name, &e)),
        }
    }

    /// The commit a full id or a unique prefix of at least 7 hex digits names, as people paste
    /// them from `git log --oneline`.
    pub fn resolve_commit(&self, text: &str) -> Result<Oid, GitError> {
        let text = text.trim();
        let hex =
            text.len() >= 7 && text.len() <= 40 && text.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex {
            return Err(GitError::Other(format!(
                "{text:?} is not a commit id (7 to 40 hex digits)"
            )));
        }
        let repo = self.repo();
        let object = repo
            .find_commit_by_prefix(text)
            .map_err(|e| self.classify(&e, false, format!("commit {text}: {}", e.message())))?;
        Ok(object.id())
    }

    /// A libgit2 error met reading what the mirror must hold (reached from one of its refs):
    /// [`GitError::Damaged`] when it means the mirror is damaged ([`damage`]).
    fn read_error(&self, e: git2::Error) -> GitError {
        self.classify(&e, true, e.message().to_string())
    }

    /// [`Mirror::read_error`] met reading the file or ref `at`, which the message names.
    fn read_error_at(&self, at: &str, e: &git2::Error) -> GitError {
        self.classify(e, true, format!("{at}: {}", e.message()))
    }

    fn classify(&self, e: &git2::Error, must_exist: bool, message: String) -> GitError {
        match damage(e.class(), e.code(), must_exist) {
            Some(damage) => GitError::Damaged {
                path: self.path.clone(),
                url: self.display_url(),
                damage,
                message,
            },
            None => GitError::Other(message),
        }
    }

    /// The commit `id`, which a caller may have from elsewhere (a forge, a cluster): missing,
    /// it is damage only when one of the mirror's refs names it.
    fn find_commit<'r>(&self, repo: &'r Repository, id: Oid) -> Result<git2::Commit<'r>, GitError> {
        repo.find_commit(id).map_err(|e| {
            let named = repo
                .references()
                .is_ok_and(|refs| refs.flatten().any(|r| r.target() == Some(id)));
            self.classify(&e, named, e.message().to_string())
        })
    }

    /// The tree of commit `id` ([`Mirror::find_commit`]).
    fn tree_of<'r>(&self, repo: &'r Repository, id: Oid) -> Result<git2::Tree<'r>, GitError> {
        self.find_commit(repo, id)?
            .tree()
            .map_err(|e| self.read_error(e))
    }

    /// The entries of `paths` (as configured) that `commit` does not hold.
    pub(crate) fn missing_paths<'p>(
        &self,
        commit: Oid,
        paths: &'p [String],
    ) -> Result<Vec<&'p String>, GitError> {
        let repo = self.repo();
        let tree = self.tree_of(&repo, commit)?;
        self.missing_in(&tree, paths)
    }

    /// The entries of `paths` that `tree` does not hold (the root always exists). A tree on
    /// the way that cannot be read is damage, not a path that is not there.
    fn missing_in<'p>(
        &self,
        tree: &git2::Tree<'_>,
        paths: &'p [String],
    ) -> Result<Vec<&'p String>, GitError> {
        let mut missing = Vec::new();
        for path in paths {
            let prefix = path_prefix(path);
            if prefix.is_empty() {
                continue;
            }
            match tree.get_path(Path::new(prefix)) {
                Ok(_) => {}
                Err(e) if is_absent(&e) => missing.push(path),
                Err(e) => return Err(self.read_error_at(prefix, &e)),
            }
        }
        Ok(missing)
    }

    /// Reads the files under `paths` (relative to the root) in `commit`'s tree that `filter`
    /// accepts, for [`crate::pipeline::scan`]. Symlinks and submodules are skipped and
    /// reported, never followed; a configured path the tree does not hold is an error naming
    /// it (a typo in `paths:` must not look like an empty, converged repository).
    ///
    /// Every file under the paths is read whole, or none is: a tree or blob the mirror cannot
    /// read fails the whole read ([`GitError::Damaged`]), so a commit is never built on a tree
    /// read in part.
    pub fn read_files(
        &self,
        commit: Oid,
        paths: &[String],
        filter: &FileFilter,
    ) -> Result<Gathered, GitError> {
        let repo = self.repo();
        let tree = self.tree_of(&repo, commit)?;
        let prefixes: Vec<String> = paths.iter().map(|p| path_prefix(p).to_string()).collect();
        let mut read = Gathered::default();
        for missing in self.missing_in(&tree, paths)? {
            read.errors.push(ManifestError::Io {
                path: PathBuf::from(path_prefix(missing)),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "configured in paths, but commit {commit} has no such file or directory"
                    ),
                ),
            });
        }
        let mut failure = None;
        let walked = tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            let Some(name) = entry.name() else {
                return git2::TreeWalkResult::Ok;
            };
            let path = format!("{dir}{name}");
            let Some(relative) = prefixes.iter().find_map(|p| under(&path, p)) else {
                // Not under any configured path; descend only if some path lies below.
                let descend = entry.kind() == Some(ObjectType::Tree)
                    && prefixes.iter().any(|p| p.starts_with(&format!("{path}/")));
                return if descend {
                    git2::TreeWalkResult::Ok
                } else {
                    git2::TreeWalkResult::Skip
                };
            };
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    if name.starts_with('.') {
                        return git2::TreeWalkResult::Skip;
                    }
                    git2::TreeWalkResult::Ok
                }
                Some(ObjectType::Blob) => {
                    if !filter.matches(Path::new(&relative)) {
                        return git2::TreeWalkResult::Ok;
                    }
                    if entry.filemode() == i32::from(FileMode::Link) {
                        read.skipped.push(Skipped::file(&path, SkipWhy::Symlink));
                        return git2::TreeWalkResult::Ok;
                    }
                    // The size from the object's header first: a blob over the limit is
                    // refused without being inflated into memory.
                    let read_blob = blob_size(&repo, entry.id()).and_then(|size| {
                        if size > MAX_FILE_BYTES {
                            return Ok(Err(size));
                        }
                        repo.find_blob(entry.id())
                            .map(|blob| Ok(blob.content().to_vec()))
                    });
                    match read_blob {
                        Ok(Ok(bytes)) => read.files.push(SourceFile {
                            path: PathBuf::from(&path),
                            bytes,
                        }),
                        Ok(Err(size)) => read.errors.push(ManifestError::TooLarge {
                            path: PathBuf::from(&path),
                            size,
                            limit: MAX_FILE_BYTES,
                        }),
                        Err(e) => {
                            failure = Some(self.read_error_at(&path, &e));
                            return git2::TreeWalkResult::Abort;
                        }
                    }
                    git2::TreeWalkResult::Ok
                }
                Some(ObjectType::Commit) => {
                    read.skipped.push(Skipped::file(&path, SkipWhy::Submodule));
                    git2::TreeWalkResult::Ok
                }
                _ => git2::TreeWalkResult::Ok,
            }
        });
        // A subtree that cannot be read fails the walk itself; a blob, through `failure`.
        match (failure, walked) {
            (Some(failed), _) => Err(failed),
            (None, Err(e)) => Err(self.read_error(e)),
            (None, Ok(())) => Ok(read),
        }
    }

    /// What the path `path` (relative to the root) holds in `commit`'s tree, for
    /// [`crate::render`], which follows kustomizations to files outside the configured paths.
    /// Read from the tree, never from a disk. A symlink, at the path or on the way to it, is
    /// reported as such and never followed; a path that is absolute or holds `..` or `.` is
    /// refused before anything is read, as is a submodule.
    pub fn read_path(&self, commit: Oid, path: &Path) -> Result<Lookup, GitError> {
        let mut parts = Vec::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => parts.push(part),
                _ => {
                    return Ok(Lookup::Refused(format!(
                        "{}: only plain paths inside the repository are read",
                        path.display()
                    )))
                }
            }
        }
        let repo = self.repo();
        let mut tree = self.tree_of(&repo, commit)?;
        let failed = |e: git2::Error| self.read_error_at(&path.display().to_string(), &e);
        for (i, part) in parts.iter().enumerate() {
            let Some((kind, id, link)) = tree.get_name_bytes(part.as_encoded_bytes()).map(|e| {
                let link = e.filemode() == i32::from(FileMode::Link);
                (e.kind(), e.id(), link)
            }) else {
                return Ok(Lookup::Missing);
            };
            match kind {
                _ if link => return Ok(Lookup::Symlink),
                Some(ObjectType::Tree) => tree = repo.find_tree(id).map_err(failed)?,
                Some(ObjectType::Blob) if i + 1 == parts.len() => {
                    if blob_size(&repo, id).map_err(failed)? > MAX_FILE_BYTES {
                        return Ok(Lookup::Refused(format!(
                            "{}: larger than {MAX_FILE_BYTES} bytes",
                            path.display()
                        )));
                    }
                    let blob = repo.find_blob(id).map_err(failed)?;
                    return Ok(Lookup::File(blob.content().to_vec()));
                }
                // A file on the way to the path: the path does not exist.
                Some(ObjectType::Blob) => return Ok(Lookup::Missing),
                _ => return Ok(Lookup::Refused(format!("{}: a submodule", path.display()))),
            }
        }
        Ok(Lookup::Directory)
    }

    /// Builds a commit on `parent` in which each given file has new content (mode kept).
    pub fn commit(
        &self,
        parent: Oid,
        files: &[(PathBuf, Vec<u8>)],
        author: &crate::config::Author,
        message: &str,
    ) -> Result<Oid, GitError> {
        let tree_id = self.tree_with(parent, files)?;
        self.commit_tree(parent, tree_id, author, message)
    }

    /// Like [`Mirror::commit`], for one of tagpin's own branches: the message ends with the
    /// [`TREE_TRAILER`] naming the tree written, which [`Mirror::is_own_commit`] checks.
    pub(crate) fn commit_owned(
        &self,
        parent: Oid,
        files: &[(PathBuf, Vec<u8>)],
        author: &crate::config::Author,
        message: &str,
    ) -> Result<Oid, GitError> {
        let tree_id = self.tree_with(parent, files)?;
        self.commit_tree(parent, tree_id, author, &owned_message(message, tree_id))
    }

    /// What a commit made on the forge's side (`forge.api_commits`) needs so that it is the
    /// commit [`Mirror::commit_owned`] would make, but for its committer and signature:
    /// `parent`'s tree, the tree it must end with, and whether each of `files` is executable
    /// there. The forge's tree is checked against this one before the commit is made.
    pub(crate) fn forge_parts(
        &self,
        parent: Oid,
        files: &[(PathBuf, Vec<u8>)],
    ) -> Result<ForgeParts, GitError> {
        let tree = self.tree_with(parent, files)?;
        let repo = self.repo();
        let base_tree = self.tree_of(&repo, parent)?.id();
        let new = repo.find_tree(tree).map_err(|e| self.read_error(e))?;
        let executable = files
            .iter()
            .map(|(path, _)| {
                let entry = new.get_path(path).map_err(|e| self.read_error(e))?;
                Ok(entry.filemode() == i32::from(FileMode::BlobExecutable))
            })
            .collect::<Result<_, GitError>>()?;
        Ok(ForgeParts {
            base_tree,
            tree,
            executable,
        })
    }

    /// Whether `commit` is, as it stands, one tagpin wrote on its own branch: one parent, and
    /// a [`TREE_TRAILER`] naming the very tree the commit has.
    ///
    /// Neither the committer identity nor the message is enough, as a person can copy both
    /// (an amend keeps the message; a person may use the bot's identity). But a person's
    /// amend, rebase or commit on top changes the tree, and the trailer, written by tagpin
    /// before anyone could change the tree, then no longer names it. A commit whose tree is
    /// the one tagpin wrote holds no one's work but tagpin's, whoever made the commit, so
    /// replacing it loses nothing (a person's edit of the message alone would be lost).
    ///
    /// With `author.signing` configured, the commit must also carry a signature that
    /// tagpin's key verifies ([`Mirror::is_trusted`]): the shape alone can be forged by anyone
    /// who may push.
    pub(crate) fn is_own_commit(&self, commit: Oid) -> Result<bool, GitError> {
        let shaped = {
            let repo = self.repo();
            let c = self.find_commit(&repo, commit)?;
            c.parent_count() == 1 && tree_trailer(c.message_bytes()) == Some(c.tree_id())
        };
        Ok(shaped && self.is_trusted(commit)?)
    }

    /// Whether what `commit` says about tagpin (its trailers) may be believed: always without
    /// `author.signing`, which the docs say (anyone who may push can write a trailer); with
    /// it, only when the commit's signature verifies with tagpin's own key.
    pub(crate) fn is_trusted(&self, commit: Oid) -> Result<bool, GitError> {
        let Some(signer) = &self.signer else {
            return Ok(true);
        };
        Ok(match self.signature(commit)? {
            Some((signature, signed)) => signer.public().verifies(&signature, &signed),
            None => false,
        })
    }

    /// The signature in `commit`'s `gpgsig` header and the bytes it signs (the commit without
    /// that header), or `None` for an unsigned commit.
    pub fn signature(&self, commit: Oid) -> Result<Option<(String, Vec<u8>)>, GitError> {
        let repo = self.repo();
        // Asked first so that an id from elsewhere that the mirror lacks is not damage.
        self.find_commit(&repo, commit)?;
        match repo.extract_signature(&commit, Some("gpgsig")) {
            Ok((signature, signed)) => Ok(Some((
                String::from_utf8_lossy(&signature).into_owned(),
                signed.to_vec(),
            ))),
            Err(e)
                if e.code() == git2::ErrorCode::NotFound && e.class() != git2::ErrorClass::Odb =>
            {
                Ok(None)
            }
            Err(e) => Err(self.read_error(e)),
        }
    }

    /// Builds the commit, signed with `author.signing`'s key when one is configured: the
    /// signature covers the commit as git hashes it, less the `gpgsig` header it goes in.
    fn commit_tree(
        &self,
        parent: Oid,
        tree_id: Oid,
        author: &crate::config::Author,
        message: &str,
    ) -> Result<Oid, GitError> {
        let repo = self.repo();
        let tree = repo.find_tree(tree_id).map_err(|e| self.read_error(e))?;
        let parent = self.find_commit(&repo, parent)?;
        let signature = git2::Signature::now(&author.name, &author.email).map_err(other)?;
        let Some(signer) = &self.signer else {
            return repo
                .commit(None, &signature, &signature, message, &tree, &[&parent])
                .map_err(|e| self.read_error(e));
        };
        let buffer = repo
            .commit_create_buffer(&signature, &signature, message, &tree, &[&parent])
            .map_err(|e| self.read_error(e))?;
        let text = std::str::from_utf8(&buffer)
            .map_err(|_| GitError::Other("a commit to sign is not UTF-8 text".into()))?;
        let armoured = signer.sign(text.as_bytes())?;
        repo.commit_signed(text, &armoured, Some("gpgsig"))
            .map_err(|e| self.read_error(e))
    }

    /// The tree `parent`'s tree becomes with `files` replaced (each keeps its file mode).
    ///
    /// Only the trees on the way to `files` are rewritten; every other entry is kept by id,
    /// read or not, so nothing the mirror could not read is left out. A file whose place in
    /// the base tree cannot be read is an error, never taken for a new file.
    pub(crate) fn tree_with(
        &self,
        parent: Oid,
        files: &[(PathBuf, Vec<u8>)],
    ) -> Result<Oid, GitError> {
        let repo = self.repo();
        let base = self.tree_of(&repo, parent)?;
        let mut update = git2::build::TreeUpdateBuilder::new();
        for (path, bytes) in files {
            let at = path.display().to_string();
            let blob = repo.blob(bytes).map_err(|e| self.read_error_at(&at, &e))?;
            let executable = match base.get_path(path) {
                Ok(entry) => entry.filemode() == i32::from(FileMode::BlobExecutable),
                Err(e) if is_absent(&e) => false,
                Err(e) => return Err(self.read_error_at(&at, &e)),
            };
            let mode = if executable {
                FileMode::BlobExecutable
            } else {
                FileMode::Blob
            };
            update.upsert(path_str(path)?, blob, mode);
        }
        update
            .create_updated(&repo, &base)
            .map_err(|e| self.read_error(e))
    }

    /// `commit` and up to `max - 1` of its first-parent ancestors, newest first: the history
    /// of a branch as its merges made it. A parent the mirror cannot read is damage, never the
    /// end of the history.
    pub(crate) fn first_parents(&self, commit: Oid, max: usize) -> Result<Vec<Oid>, GitError> {
        let repo = self.repo();
        let mut out = Vec::new();
        let mut current = self.find_commit(&repo, commit)?;
        loop {
            out.push(current.id());
            if out.len() >= max || current.parent_count() == 0 {
                return Ok(out);
            }
            current = current.parent(0).map_err(|e| self.read_error(e))?;
        }
    }

    /// The newest of `commit` and its first-parent ancestors (at most `max`) that tagpin
    /// wrote ([`Mirror::is_own_commit`]), with its committer time and message: what tagpin
    /// pinned last, read back from Git when nothing recorded it (a controller stopped between
    /// its push and its status write).
    pub(crate) fn last_own_commit(
        &self,
        commit: Oid,
        max: usize,
    ) -> Result<Option<(Oid, i64, String)>, GitError> {
        for id in self.first_parents(commit, max)? {
            if self.is_own_commit(id)? {
                let repo = self.repo();
                let c = self.find_commit(&repo, id)?;
                let message = String::from_utf8_lossy(c.message_bytes()).into_owned();
                return Ok(Some((id, c.committer().when().seconds(), message)));
            }
        }
        Ok(None)
    }

    /// Each file `commit` changed against its first parent (for a merge: the target side), with
    /// its content before and after. `None` when it added, removed or renamed a file: not a
    /// change of fields that a revert could undo field by field.
    pub fn changed_files(&self, commit: Oid) -> Result<Option<Changed>, GitError> {
        self.changed_files_within(commit, None, usize::MAX)
    }

    /// [`Mirror::changed_files`] of `only` (a path) if given, and empty when the commit
    /// changed more than `max` files (nothing of them is read).
    pub(crate) fn changed_files_within(
        &self,
        commit: Oid,
        only: Option<&Path>,
        max: usize,
    ) -> Result<Option<Changed>, GitError> {
        let repo = self.repo();
        let c = self.find_commit(&repo, commit)?;
        // A root commit adds every file: not a change of fields.
        if c.parent_count() == 0 {
            return Ok(None);
        }
        let failed = |e: git2::Error| self.read_error(e);
        let parent = c.parent(0).map_err(failed)?;
        let (old, new) = (parent.tree().map_err(failed)?, c.tree().map_err(failed)?);
        let mut options = git2::DiffOptions::new();
        if let Some(only) = only {
            options
                .pathspec(path_str(only)?)
                .disable_pathspec_match(true);
        }
        let diff = repo
            .diff_tree_to_tree(Some(&old), Some(&new), Some(&mut options))
            .map_err(failed)?;
        if diff.deltas().len() > max {
            return Ok(Some(Vec::new()));
        }
        let mut out = Vec::new();
        for delta in diff.deltas() {
            if delta.status() != git2::Delta::Modified {
                return Ok(None);
            }
            let Some(path) = delta.new_file().path() else {
                return Ok(None);
            };
            let blob = |id| repo.find_blob(id).map(|b| b.content().to_vec());
            let before = blob(delta.old_file().id()).map_err(failed)?;
            let after = blob(delta.new_file().id()).map_err(failed)?;
            out.push((path.to_path_buf(), before, after));
        }
        Ok(Some(out))
    }

    /// The content of each of `paths` after `git revert <commit>` on top of `onto` (a merge is
    /// reverted against its first parent). `None` when the revert does not apply cleanly (a
    /// later commit changed the same lines) or leaves one of `paths` out: nothing is
    /// reverted then.
    pub(crate) fn revert_files(
        &self,
        commit: Oid,
        onto: Oid,
        paths: &[&Path],
    ) -> Result<Option<Files>, GitError> {
        let repo = self.repo();
        let c = self.find_commit(&repo, commit)?;
        let onto = self.find_commit(&repo, onto)?;
        let mainline = if c.parent_count() > 1 { 1 } else { 0 };
        let index = repo
            .revert_commit(&c, &onto, mainline, None)
            .map_err(|e| self.read_error(e))?;
        if index.has_conflicts() {
            return Ok(None);
        }
        let mut out = Vec::new();
        for path in paths {
            let Some(entry) = index.get_path(path, 0) else {
                return Ok(None);
            };
            let blob = repo.find_blob(entry.id).map_err(|e| self.read_error(e))?;
            out.push((path.to_path_buf(), blob.content().to_vec()));
        }
        Ok(Some(out))
    }

    /// The content of `path` in `commit`'s tree, if it is a file there. A file the tree names
    /// but the mirror cannot read is an error, not a file that is not there.
    pub(crate) fn file_at(&self, commit: Oid, path: &Path) -> Result<Option<Vec<u8>>, GitError> {
        let repo = self.repo();
        let tree = self.tree_of(&repo, commit)?;
        let at = path.display().to_string();
        let entry = match tree.get_path(path) {
            Ok(entry) => entry,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(self.read_error_at(&at, &e)),
        };
        if entry.kind() != Some(ObjectType::Blob) {
            return Ok(None);
        }
        let blob = repo
            .find_blob(entry.id())
            .map_err(|e| self.read_error_at(&at, &e))?;
        Ok(Some(blob.content().to_vec()))
    }

    /// The messages of `commit` and its ancestors (every parent, newest first, at most
    /// `max`): where tagpin's trailers are read back from.
    pub fn messages(&self, commit: Oid, max: usize) -> Result<Vec<(Oid, String)>, GitError> {
        let repo = self.repo();
        // Asked first so that an id from elsewhere that the mirror lacks is not damage.
        self.find_commit(&repo, commit)?;
        let failed = |e: git2::Error| self.read_error(e);
        let mut walk = repo.revwalk().map_err(failed)?;
        walk.push(commit).map_err(failed)?;
        walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::TIME)
            .map_err(failed)?;
        let mut out = Vec::new();
        for id in walk.take(max) {
            let id = id.map_err(failed)?;
            let c = repo.find_commit(id).map_err(failed)?;
            out.push((id, String::from_utf8_lossy(c.message_bytes()).into_owned()));
        }
        Ok(out)
    }

    /// The commits of `commit`'s whole history (every ancestor, newest first) whose message
    /// contains `needle`, with their messages: where trailers that must not wear off by
    /// commit count are read back from. Only the matching messages are kept.
    pub(crate) fn messages_mentioning(
        &self,
        commit: Oid,
        needle: &str,
    ) -> Result<Vec<(Oid, String)>, GitError> {
        let repo = self.repo();
        // Asked first so that an id from elsewhere that the mirror lacks is not damage.
        self.find_commit(&repo, commit)?;
        let failed = |e: git2::Error| self.read_error(e);
        let mut walk = repo.revwalk().map_err(failed)?;
        walk.push(commit).map_err(failed)?;
        walk.set_sorting(git2::Sort::TIME).map_err(failed)?;
        let needle = needle.as_bytes();
        let mut out = Vec::new();
        for id in walk {
            let id = id.map_err(failed)?;
            let c = repo.find_commit(id).map_err(failed)?;
            let message = c.message_bytes();
            if message.windows(needle.len()).any(|w| w == needle) {
                out.push((id, String::from_utf8_lossy(message).into_owned()));
            }
        }
        Ok(out)
    }

    /// When a commit was made (committer time, Unix seconds): how long the GitOps tool has had
    /// to apply it.
    pub(crate) fn commit_time(&self, commit: Oid) -> Result<i64, GitError> {
        let repo = self.repo();
        let c = self.find_commit(&repo, commit)?;
        let seconds = c.committer().when().seconds();
        Ok(seconds)
    }

    /// The cache directory the mirror lives in (what [`Mirror::open`] was given): where other
    /// state kept beside it goes (first sightings of digests, `images.minimum_age`).
    pub fn cache_dir(&self) -> &Path {
        self.path.parent().unwrap_or(&self.path)
    }

    /// The parents of a commit, first parent first.
    pub fn parents(&self, commit: Oid) -> Result<Vec<Oid>, GitError> {
        let repo = self.repo();
        let c = self.find_commit(&repo, commit)?;
        Ok(c.parent_ids().collect())
    }

    /// The object id each of `paths` (a directory or file, relative to the root; `.` is the
    /// root) names in `commit`'s tree, `None` where nothing is: two commits with the same ids
    /// hold the same files there, told without reading them.
    pub(crate) fn path_ids(
        &self,
        commit: Oid,
        paths: &[String],
    ) -> Result<Vec<Option<Oid>>, GitError> {
        let repo = self.repo();
        let tree = self.tree_of(&repo, commit)?;
        paths
            .iter()
            .map(|path| {
                let relative = path.trim_start_matches("./").trim_matches('/');
                if relative.is_empty() || relative == "." {
                    return Ok(Some(tree.id()));
                }
                match tree.get_path(Path::new(relative)) {
                    Ok(entry) => Ok(Some(entry.id())),
                    Err(e) if is_absent(&e) => Ok(None),
                    Err(e) => Err(self.read_error_at(path, &e)),
                }
            })
            .collect()
    }

    /// The tree and first parent of a commit, to tell whether a branch already holds a change.
    pub(crate) fn tree_and_parent(&self, commit: Oid) -> Result<(Oid, Option<Oid>), GitError> {
        let repo = self.repo();
        let c = self.find_commit(&repo, commit)?;
        Ok((c.tree_id(), c.parent_ids().next()))
    }

    /// Another handle on the same mirror, for work that outlives the borrow of this one (the
    /// verifier asks about GitOps revisions at every check). A `Repository` cannot be shared
    /// between threads, but two handles on one directory can be used side by side.
    pub fn try_clone(&self) -> Result<Mirror, GitError> {
        Ok(Mirror {
            repo: RefCell::new(open_bare(&self.path)?),
            path: self.path.clone(),
            url: self.url.clone(),
            credentials: self.credentials.clone(),
            lock_path: self.lock_path.clone(),
            limits: self.limits,
            opened: Cell::new(dir_identity(&self.path)),
            repairs: Cell::new(0),
            transfers: Cell::default(),
            advertised_notes: Cell::default(),
            signer: self.signer.clone(),
        })
    }

    /// Whether commit `candidate` is `ancestor` or comes after it (`git merge-base
    /// --is-ancestor ancestor candidate`): a GitOps tool that applied `candidate` applied
    /// everything `ancestor` changed. `None` when the mirror does not hold one of them (yet: a
    /// fetch may bring it), or either is not a commit id.
    pub(crate) fn is_descendant_or_equal(
        &self,
        candidate: &str,
        ancestor: &str,
    ) -> Result<Option<bool>, GitError> {
        let repo = self.repo();
        let commit = |text: &str| {
            Oid::from_str(text)
                .ok()
                .filter(|_| text.len() == 40 || text.len() == 64)
                .filter(|oid| repo.find_commit(*oid).is_ok())
        };
        let (Some(candidate), Some(ancestor)) = (commit(candidate), commit(ancestor)) else {
            return Ok(None);
        };
        if candidate == ancestor {
            return Ok(Some(true));
        }
        repo.graph_descendant_of(candidate, ancestor)
            .map(Some)
            .map_err(|e| self.read_error(e))
    }

    /// Pushes `commit` to `branch`, on the condition `expect` states.
    pub fn push(&self, commit: Oid, branch: &str, expect: Expect) -> Result<(), GitError> {
        // The push ref is written into the mirror.
        let _lock = MirrorLock::acquire(&self.lock_path)?;
        if let Some(path) = local_path(&self.url) {
            return self.push_local(&path, commit, branch, expect);
        }
        let repo = self.repo();
        let mut remote = repo
            .remote_anonymous(&self.url)
            .map_err(|e| self.push_error(e))?;
        let force = match expect {
            Expect::FastForwardFrom(_) => "",
            Expect::Lease(expected) => {
                let found = self.remote_tip(&mut remote, branch)?;
                if found != expected {
                    return Err(self.lease_broken(branch, expected, found));
                }
                "+"
            }
        };
        self.send(
            &mut remote,
            commit,
            &format!("{force}{PUSH_REF}:refs/heads/{branch}"),
            branch,
        )
    }

    /// libgit2's local transport moves refs without checking their old value, so two writers
    /// could overwrite each other. For a repository on this machine tagpin writes the new
    /// objects into its object database itself, then moves the branch by compare-and-swap under
    /// the ref's lock. (No scratch ref is used: another process fetching at that moment would
    /// list it and fail when it vanished.)
    fn push_local(
        &self,
        path: &Path,
        commit: Oid,
        branch: &str,
        expect: Expect,
    ) -> Result<(), GitError> {
        let target = Repository::open(path).map_err(|e| self.push_error(e))?;
        self.copy_objects(&target, commit)
            .map_err(|e| self.push_error(e))?;
        let name = format!("refs/heads/{branch}");
        let moved = match expect {
            Expect::FastForwardFrom(base) | Expect::Lease(Some(base)) => {
                target.reference_matching(&name, commit, true, base, "tagpin")
            }
            Expect::Lease(None) => target.reference(&name, commit, false, "tagpin"),
        }
        .map(|_| ());
        match (moved, expect) {
            (Ok(()), _) => Ok(()),
            (Err(e), Expect::FastForwardFrom(_)) if is_stale(&e) => Err(GitError::NonFastForward {
                url: self.display_url(),
                branch: branch.to_string(),
            }),
            (Err(e), Expect::Lease(expected)) if is_stale(&e) => {
                let found = target.find_reference(&name).ok().and_then(|r| r.target());
                Err(self.lease_broken(branch, expected, found))
            }
            (Err(e), _) => Err(self.push_error(e)),
        }
    }

    /// Writes `commit` and the objects of its tree that `target` lacks into `target`, each
    /// object after everything it points to, so that an object present in `target` is always
    /// complete there (an interrupted copy leaves only unreachable objects). That is also why a
    /// tree `target` already has is skipped whole. The parents must be there already: they are
    /// the tip tagpin fetched from `target`.
    fn copy_objects(&self, target: &Repository, commit: Oid) -> Result<(), git2::Error> {
        let destination = target.odb()?;
        if destination.exists(commit) {
            return Ok(());
        }
        let repo = self.repo();
        let c = repo.find_commit(commit)?;
        if let Some(parent) = c.parent_ids().find(|p| !destination.exists(*p)) {
            return Err(git2::Error::from_str(&format!(
                "the remote lacks {parent}, the commit tagpin built on"
            )));
        }
        self.copy_tree(&destination, c.tree_id())?;
        self.copy_object(&destination, commit)
    }

    /// A tree's blobs and subtrees first, then the tree itself.
    fn copy_tree(&self, destination: &git2::Odb<'_>, tree: Oid) -> Result<(), git2::Error> {
        if destination.exists(tree) {
            return Ok(());
        }
        let repo = self.repo();
        for entry in repo.find_tree(tree)?.iter() {
            match entry.kind() {
                Some(ObjectType::Tree) => self.copy_tree(destination, entry.id())?,
                Some(ObjectType::Blob) if !destination.exists(entry.id()) => {
                    self.copy_object(destination, entry.id())?
                }
                _ => {}
            }
        }
        self.copy_object(destination, tree)
    }

    fn copy_object(&self, destination: &git2::Odb<'_>, oid: Oid) -> Result<(), git2::Error> {
        let repo = self.repo();
        let source = repo.odb()?;
        let object = source.read(oid)?;
        destination.write(object.kind(), object.data())?;
        Ok(())
    }

    /// The branch's tip as the remote advertises it now.
    fn remote_tip(
        &self,
        remote: &mut git2::Remote<'_>,
        branch: &str,
    ) -> Result<Option<Oid>, GitError> {
        let attempts = Cell::new(0);
        remote
            .connect_auth(Direction::Push, Some(self.callbacks(&attempts)), None)
            .map_err(|e| self.push_error(e))?;
        let wanted = format!("refs/heads/{branch}");
        let found = remote
            .list()
            .map_err(|e| self.push_error(e))?
            .iter()
            .find(|h| h.name() == wanted)
            .map(|h| h.oid());
        remote.disconnect().map_err(|e| self.push_error(e))?;
        Ok(found)
    }

    fn lease_broken(&self, branch: &str, expected: Option<Oid>, found: Option<Oid>) -> GitError {
        GitError::LeaseBroken {
            url: self.display_url(),
            branch: branch.to_string(),
            expected: expected.map_or("no branch".to_string(), |o| o.to_string()),
            found: found.map_or("no branch".to_string(), |o| o.to_string()),
        }
    }

    /// Sends one refspec and reads the remote's verdict on it.
    fn send(
        &self,
        remote: &mut git2::Remote<'_>,
        commit: Oid,
        refspec: &str,
        branch: &str,
    ) -> Result<(), GitError> {
        self.repo()
            .reference(PUSH_REF, commit, true, "tagpin push")
            .map_err(|e| self.read_error_at(PUSH_REF, &e))?;
        let url = self.display_url();
        let rejection: RefCell<Option<String>> = RefCell::new(None);
        let attempts = Cell::new(0);
        let mut callbacks = self.callbacks(&attempts);
        callbacks.push_update_reference(|_, status| {
            if let Some(status) = status {
                *rejection.borrow_mut() = Some(status.to_string());
            }
            Ok(())
        });
        let mut options = PushOptions::new();
        options.remote_callbacks(callbacks);
        let pushed = remote.push(&[refspec], Some(&mut options));
        drop(options);
        let rejection = rejection.into_inner();
        match (pushed, rejection) {
            (Err(e), _) if e.code() == git2::ErrorCode::NotFastForward => {
                Err(GitError::NonFastForward {
                    url,
                    branch: branch.to_string(),
                })
            }
            (Err(e), _) => Err(self.push_error(e)),
            (Ok(()), Some(reason)) if is_non_fast_forward(&reason) => {
                Err(GitError::NonFastForward {
                    url,
                    branch: branch.to_string(),
                })
            }
            (Ok(()), Some(reason)) => Err(GitError::Rejected {
                url,
                branch: branch.to_string(),
                reason,
            }),
            (Ok(()), None) => Ok(()),
        }
    }

    /// Callbacks answering credential requests once: libgit2 asks again forever after a
    /// refusal, so the second ask fails the operation with an authentication error.
    fn callbacks<'a>(&'a self, attempts: &'a Cell<u32>) -> RemoteCallbacks<'a> {
        let mut callbacks = RemoteCallbacks::new();
        callbacks.credentials(move |_url, username_from_url, allowed| {
            attempts.set(attempts.get() + 1);
            if attempts.get() > 1 {
                return Err(git2::Error::new(
                    git2::ErrorCode::Auth,
                    git2::ErrorClass::Net,
                    "the remote refused the configured credentials",
                ));
            }
            match &self.credentials {
                Credentials::Token { username, token }
                    if allowed.contains(git2::CredentialType::USER_PASS_PLAINTEXT) =>
                {
                    git2::Cred::userpass_plaintext(username, token)
                }
                Credentials::SshKey {
                    key_file,
                    passphrase,
                } if allowed.contains(git2::CredentialType::SSH_KEY) => git2::Cred::ssh_key(
                    username_from_url.unwrap_or("git"),
                    None,
                    key_file,
                    passphrase.as_deref(),
                ),
                _ => Err(git2::Error::new(
                    git2::ErrorCode::Auth,
                    git2::ErrorClass::Net,
                    "the remote asks for credentials and none are configured for it",
                )),
            }
        });
        callbacks
    }

    fn too_large(&self, limit: u64, size: u64) -> GitError {
        GitError::TooLarge {
            url: self.display_url(),
            limit,
            size,
        }
    }

    /// Whether every branch a fetch of `branch` and the branches under `prefix` follows
    /// already stands in the mirror where the remote has it, and the mirror holds no branch the
    /// remote deleted: then the fetch would bring nothing. Asked with one ref listing (the ref
    /// advertisement `git ls-remote` reads), which costs the remote far less than a fetch's
    /// negotiation: at rest, a pass over an unchanged repository fetches nothing. Any failure
    /// answers no, and the fetch that follows says what is wrong in its own words.
    fn tips_unchanged(
        &self,
        repo: &Repository,
        remote: &mut git2::Remote<'_>,
        branch: &str,
        prefix: Option<&str>,
    ) -> bool {
        self.count(|t| t.ref_listings += 1);
        let followed =
            |name: &str| name == branch || prefix.is_some_and(|prefix| name.starts_with(prefix));
        let attempts = Cell::new(0);
        let callbacks = self.callbacks(&attempts);
        let Ok(connection) = remote.connect_auth(Direction::Fetch, Some(callbacks), None) else {
            return false;
        };
        let Ok(heads) = connection.list() else {
            return false;
        };
        self.remember_notes_advertised(heads);
        let remote_tips: std::collections::BTreeMap<String, Oid> = heads
            .iter()
            .filter_map(|head| Some((head.name().strip_prefix("refs/heads/")?, head.oid())))
            .filter(|(name, _)| followed(name))
            .map(|(name, oid)| (name.to_string(), oid))
            .collect();
        drop(connection);
        let Ok(references) = repo.references_glob(&format!("{REMOTE_PREFIX}*")) else {
            return false;
        };
        let mut mirror_tips = std::collections::BTreeMap::new();
        for reference in references {
            let Ok(reference) = reference else {
                return false;
            };
            let (Some(name), Some(oid)) = (reference.name(), reference.target()) else {
                return false;
            };
            match name.strip_prefix(REMOTE_PREFIX) {
                Some(name) if followed(name) => mirror_tips.insert(name.to_string(), oid),
                _ => None,
            };
        }
        remote_tips == mirror_tips
    }

    fn count(&self, add: impl FnOnce(&mut Transfers)) {
        let mut transfers = self.transfers.get();
        add(&mut transfers);
        self.transfers.set(transfers);
    }

    /// A failed fetch. Damage is told by class ([`damage`]): a fetch reads the mirror's refs
    /// and objects (to update the refs, and to tell the remote what it has), and a `file://`
    /// remote's objects too, so damage found here may be the remote's; [`Mirror::repair`]
    /// finds out by fetching into a fresh mirror.
    fn fetch_error(&self, e: git2::Error) -> GitError {
        let url = self.display_url();
        let message = scrub(e.message(), &self.credentials);
        if e.code() == git2::ErrorCode::Auth
            || e.class() == git2::ErrorClass::Http && message.contains("401")
        {
            return GitError::Auth { url, message };
        }
        match damage(e.class(), e.code(), true) {
            Some(_) => self.classify(&e, true, format!("cannot fetch from {url}: {message}")),
            None => GitError::Fetch { url, message },
        }
    }

    /// A failed push. An object the push could not read is the mirror's damage (the remote's
    /// objects are not read, but for a `file://` remote's refs, which a corrupt one is the
    /// remote's own).
    fn push_error(&self, e: git2::Error) -> GitError {
        let url = self.display_url();
        let message = scrub(e.message(), &self.credentials);
        if e.code() == git2::ErrorCode::Auth {
            return GitError::Auth { url, message };
        }
        match damage(e.class(), e.code(), true) {
            Some(Damage::MissingObject | Damage::CorruptObject) => {
                self.classify(&e, true, format!("cannot push to {url}: {message}"))
            }
            _ => GitError::Push { url, message },
        }
    }
}

/// Why a fetch was stopped by its [`FetchLimits`].
#[derive(Debug, Clone, Copy)]
enum Stop {
    TooLarge(u64),
    Deadline,
}

/// What the remote branch must hold for a push to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// The target branch: a fast-forward from the tip the commit was built on. Never forced.
    FastForwardFrom(Oid),
    /// A tagpin-owned branch: force-updated, but only over the tip tagpin saw there
    /// (`None`: the branch must not exist yet), so a person's push to it is never lost.
    Lease(Option<Oid>),
}

/// The directory of a remote on this machine (`file://…` or a path), if it is one.
fn local_path(url: &str) -> Option<PathBuf> {
    if let Some(rest) = url.strip_prefix("file://") {
        return Some(PathBuf::from(rest));
    }
    let scp_like = url
        .find(':')
        .is_some_and(|c| url.find('/').is_none_or(|s| c < s));
    (!url.contains("://") && !scp_like).then(|| PathBuf::from(url))
}

/// A configured path as a prefix of tree paths: `./apps/` is `apps`, `.` is the root (empty).
fn path_prefix(path: &str) -> &str {
    match path.trim_start_matches("./").trim_end_matches('/') {
        "." => "",
        prefix => prefix,
    }
}

/// The ref moved (or appeared) under us, or another writer holds its lock right now: a
/// compare-and-swap lost, and the pass is planned again.
fn is_stale(e: &git2::Error) -> bool {
    matches!(
        e.code(),
        git2::ErrorCode::Modified
            | git2::ErrorCode::Exists
            | git2::ErrorCode::NotFound
            | git2::ErrorCode::Locked
    )
}

/// Creates the cache directory `0700` (with any missing parents), or checks the mode of an
/// existing one. One others can list is left as it is, with a warning: it may be shared on
/// purpose (a configured `/var/cache`), and the mirrors inside are `0700` whatever it is.
fn prepare_cache_dir(dir: &Path) -> Result<(), GitError> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                // Listing reveals only mirror names; writing (without the sticky bit) would
                // let another user put a repository of their own in a mirror's place.
                let writable = mode & 0o022 != 0 && mode & 0o1000 == 0;
                tracing::warn!(
                    "cache directory {} has mode {mode:04o}: other users can list it{} (each git mirror in it is 0700 all the same); chmod 700 it unless it is shared on purpose",
                    dir.display(),
                    if writable { " and replace the mirrors in it" } else { "" }
                );
            }
            Ok(())
        }
        Ok(_) => Err(mirror_error(dir, "exists and is not a directory".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => DirBuilder::new()
            .recursive(true)
            .mode(PRIVATE_DIR_MODE)
            .create(dir)
            .map_err(|e| mirror_error(dir, e.to_string())),
        Err(e) => Err(mirror_error(dir, e.to_string())),
    }
}

/// Opens the bare repository at `path`, tightening it to `0700`; creates it when missing, and
/// re-creates it when it is not a repository (a half-written or damaged cache would otherwise
/// fail every pass), moving the old one aside ([`move_aside`]). Never follows a symlink at
/// `path`: that is removed, not its target. Also says whether a damaged mirror was replaced.
fn open_or_create(path: &Path, url: &str) -> Result<(Repository, bool), GitError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((create_mirror(path)?, false))
        }
        Err(e) => return Err(mirror_error(path, e.to_string())),
        Ok(meta) if !meta.is_dir() => {
            tracing::warn!(
                "git mirror {}: not a directory; re-creating it",
                path.display()
            );
            std::fs::remove_file(path).map_err(|e| mirror_error(path, e.to_string()))?;
            return Ok((create_mirror(path)?, true));
        }
        Ok(meta) => {
            let mode = meta.permissions().mode() & 0o777;
            if mode != PRIVATE_DIR_MODE {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(PRIVATE_DIR_MODE))
                    .map_err(|e| mirror_error(path, format!("cannot make it private: {e}")))?;
                tracing::warn!(
                    "git mirror {}: had mode {mode:04o}; now {PRIVATE_DIR_MODE:04o}",
                    path.display()
                );
            }
        }
    }
    match Repository::open_bare(path) {
        Ok(repo) => Ok((repo, false)),
        Err(e) => {
            let aside = move_aside(path)?;
            tracing::warn!(
                "git mirror {} (a cache of {}): not a usable repository ({}); moved it aside to {} and re-creating it, the next fetch fills it again",
                path.display(),
                redact_url(url),
                e.message(),
                aside.display()
            );
            Ok((create_mirror(path)?, true))
        }
    }
}

/// Moves the damaged mirror at `path` to `<path>.damaged`, where whoever wants to find out
/// what damaged it can look, replacing what an earlier repair left there (one copy at most).
/// A rename, so that another process reading the mirror meanwhile finds either the old
/// directory or the new one, never one half removed. The caller holds the [`MirrorLock`].
fn move_aside(path: &Path) -> Result<PathBuf, GitError> {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".damaged");
    let aside = PathBuf::from(aside);
    match std::fs::symlink_metadata(&aside) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&aside),
        Ok(_) => std::fs::remove_file(&aside),
        Err(_) => Ok(()),
    }
    .map_err(|e| {
        mirror_error(
            &aside,
            format!("cannot remove an earlier damaged copy: {e}"),
        )
    })?;
    std::fs::rename(path, &aside).map_err(|e| {
        mirror_error(
            path,
            format!("cannot move it aside to {}: {e}", aside.display()),
        )
    })?;
    Ok(aside)
}

/// Device and inode of the directory at `path`, if there is one: a mirror another process
/// moved aside and re-created has other ones.
fn dir_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|meta| meta.is_dir())
        .map(|meta| (meta.dev(), meta.ino()))
}

fn open_bare(path: &Path) -> Result<Repository, GitError> {
    Repository::open_bare(path).map_err(|e| mirror_error(path, e.message().to_string()))
}

/// Whether a tree lookup failed because the path is not in the tree (or runs through a
/// file), rather than because a tree on the way could not be read.
fn is_absent(e: &git2::Error) -> bool {
    e.class() == git2::ErrorClass::Tree && e.code() == git2::ErrorCode::NotFound
}

fn create_mirror(path: &Path) -> Result<Repository, GitError> {
    DirBuilder::new()
        .mode(PRIVATE_DIR_MODE)
        .create(path)
        .map_err(|e| mirror_error(path, e.to_string()))?;
    Repository::init_bare(path).map_err(|e| mirror_error(path, e.message().to_string()))
}

/// Removes every git lock file (`*.lock`: refs, `packed-refs`, `FETCH_HEAD`, `config`,
/// `index`, `shallow`) in the mirror at `root`, outside the object database, and logs which.
/// The caller holds the [`MirrorLock`], so none belongs to a live writer: each was left by a
/// process that stopped mid-write, and would fail every later fetch ("failed to lock file").
fn remove_stale_locks(root: &Path) {
    let mut removed = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !(dir == root && entry.file_name() == "objects") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "lock") {
                let name = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                match std::fs::remove_file(&path) {
                    Ok(()) => removed.push(name),
                    Err(e) => tracing::warn!(
                        "git mirror {}: cannot remove the stale lock file {name}: {e}",
                        root.display()
                    ),
                }
            }
        }
    }
    if !removed.is_empty() {
        removed.sort();
        tracing::warn!(
            "git mirror {}: removed stale lock files a process that stopped mid-write left: {}",
            root.display(),
            removed.join(", ")
        );
    }
}

/// The tree id a commit message's last line names as [`TREE_TRAILER`], if it does in full.
fn tree_trailer(message: &[u8]) -> Option<Oid> {
    let text = std::str::from_utf8(message).ok()?;
    let value = text
        .trim_end()
        .lines()
        .last()?
        .strip_prefix(TREE_TRAILER)?
        .strip_prefix(": ")?;
    let full = value.len() == 40 || value.len() == 64;
    full.then(|| Oid::from_str(value).ok()).flatten()
}

fn mirror_error(path: &Path, message: String) -> GitError {
    GitError::Mirror {
        path: path.to_path_buf(),
        message,
    }
}

/// `tagpin/<sha256 of the URL, 16 hex>`: one mirror per remote, no user text in the path.
fn mirror_dir_name(url: &str) -> String {
    let hash = Sha256::digest(url.as_bytes());
    let hex: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("mirror-{hex}.git")
}

/// `https://user:secret@host/x` → `https://host/x`.
pub(crate) fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        _ => url.to_string(),
    }
}

/// Removes a token from a message, should a server or library ever echo it.
fn scrub(message: &str, credentials: &Credentials) -> String {
    match credentials {
        Credentials::Token { token, .. } if !token.is_empty() => {
            message.replace(token.as_str(), "<redacted>")
        }
        _ => message.to_string(),
    }
}

fn is_non_fast_forward(reason: &str) -> bool {
    let r = reason.to_ascii_lowercase();
    r.contains("non-fast-forward")
        || r.contains("fetch first")
        || r.contains("not a fast forward")
        // The ref moved between the ref advertisement and the update (a race on the server).
        || r.contains("failed to update ref")
        || r.contains("cannot lock ref")
}

/// `path` relative to `prefix` ("" is the root), if it lies at or under it.
fn under(path: &str, prefix: &str) -> Option<String> {
    if prefix.is_empty() {
        return Some(path.to_string());
    }
    if path == prefix {
        return Some(path.rsplit('/').next().unwrap_or(path).to_string());
    }
    path.strip_prefix(&format!("{prefix}/")).map(str::to_string)
}

fn path_str(path: &Path) -> Result<&str, GitError> {
    path.to_str()
        .ok_or_else(|| GitError::Other(format!("{}: path is not UTF-8", path.display())))
}

/// A blob's size from its object header, without reading its content (for a packed delta,
/// libgit2 reads only the delta's header).
fn blob_size(repo: &Repository, id: Oid) -> Result<u64, git2::Error> {
    let (size, _) = repo.odb()?.read_header(id)?;
    Ok(u64::try_from(size).unwrap_or(u64::MAX))
}

fn other(e: git2::Error) -> GitError {
    GitError::Other(e.message().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_credentials_in_messages() {
        assert_eq!(
            redact_url("https://bot:s3cret@git.example.com/a.git"),
            "https://git.example.com/a.git"
        );
        assert_eq!(redact_url("/srv/git/a.git"), "/srv/git/a.git");
    }

    #[test]
    fn a_path_is_matched_under_its_configured_prefix() {
        assert_eq!(
            under("apps/web/d.yaml", "apps").as_deref(),
            Some("web/d.yaml")
        );
        assert_eq!(under("apps2/d.yaml", "apps"), None);
        assert_eq!(under("x.yaml", "").as_deref(), Some("x.yaml"));
        assert_eq!(
            under("apps/d.yaml", "apps/d.yaml").as_deref(),
            Some("d.yaml")
        );
    }

    #[test]
    fn non_fast_forward_is_recognised_in_server_wording() {
        assert!(is_non_fast_forward("rejected: fetch first"));
        assert!(is_non_fast_forward("non-fast-forward"));
        assert!(!is_non_fast_forward("pre-receive hook declined"));
    }

    #[test]
    fn local_remotes_are_told_from_network_ones() {
        assert_eq!(
            local_path("file:///srv/a.git"),
            Some(PathBuf::from("/srv/a.git"))
        );
        assert_eq!(local_path("/srv/a.git"), Some(PathBuf::from("/srv/a.git")));
        assert_eq!(local_path("../a.git"), Some(PathBuf::from("../a.git")));
        assert_eq!(local_path("git@github.com:acme/a.git"), None);
        assert_eq!(local_path("https://github.com/acme/a.git"), None);
        assert_eq!(local_path("git://127.0.0.1/a.git"), None);
    }

    #[test]
    fn one_path_is_read_from_a_commit_never_through_a_symlink_or_out_of_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = Mirror::open(dir.path(), "file:///nowhere", Credentials::None).unwrap();
        let repo = mirror.repo();
        let blob = |text: &str| repo.blob(text.as_bytes()).unwrap();
        let mut base = repo.treebuilder(None).unwrap();
        base.insert("kustomization.yaml", blob("resources: []\n"), 0o100644)
            .unwrap();
        let base = base.write().unwrap();
        let mut root = repo.treebuilder(None).unwrap();
        root.insert("base", base, 0o040000).unwrap();
        root.insert("linked", blob("base"), 0o120000).unwrap();
        root.insert("file.yaml", blob("a: 1\n"), 0o100644).unwrap();
        let tree = repo.find_tree(root.write().unwrap()).unwrap();
        let signature = git2::Signature::now("t", "t@example.com").unwrap();
        let commit = repo
            .commit(None, &signature, &signature, "t", &tree, &[])
            .unwrap();
        let read = |path: &str| mirror.read_path(commit, Path::new(path)).unwrap();

        assert_eq!(
            read("base/kustomization.yaml"),
            Lookup::File(b"resources: []\n".to_vec())
        );
        assert_eq!(read("base"), Lookup::Directory);
        assert_eq!(read(""), Lookup::Directory);
        assert_eq!(read("base/missing.yaml"), Lookup::Missing);
        assert_eq!(read("file.yaml/x"), Lookup::Missing);
        assert_eq!(read("linked"), Lookup::Symlink);
        assert_eq!(read("linked/kustomization.yaml"), Lookup::Symlink);
        for refused in ["../outside", "/etc/passwd", "base/../file.yaml", "./base"] {
            assert!(matches!(read(refused), Lookup::Refused(_)), "{refused}");
        }
    }

    #[test]
    fn a_revision_at_or_after_the_pin_commit_descends_from_it() {
        let dir = tempfile::tempdir().unwrap();
        let mirror =
            Mirror::open(dir.path(), "https://example.com/a.git", Credentials::None).unwrap();
        let repo = mirror.repo();
        let signature = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = repo
            .find_tree(repo.treebuilder(None).unwrap().write().unwrap())
            .unwrap();
        let commit = |message: &str, parents: &[Oid]| {
            let parents: Vec<git2::Commit> = parents
                .iter()
                .map(|p| repo.find_commit(*p).unwrap())
                .collect();
            let parents: Vec<&git2::Commit> = parents.iter().collect();
            repo.commit(None, &signature, &signature, message, &tree, &parents)
                .unwrap()
                .to_string()
        };
        let root = commit("root", &[]);
        let pin = commit("pin", &[root.parse().unwrap()]);
        let after = commit("after", &[pin.parse().unwrap()]);
        let side = commit("side", &[root.parse().unwrap()]);
        let other = mirror.try_clone().unwrap();
        for m in [&mirror, &other] {
            assert_eq!(m.is_descendant_or_equal(&after, &pin).unwrap(), Some(true));
            assert_eq!(m.is_descendant_or_equal(&pin, &pin).unwrap(), Some(true));
            assert_eq!(m.is_descendant_or_equal(&root, &pin).unwrap(), Some(false));
            assert_eq!(m.is_descendant_or_equal(&side, &pin).unwrap(), Some(false));
            let unknown = "1".repeat(40);
            assert_eq!(m.is_descendant_or_equal(&unknown, &pin).unwrap(), None);
            assert_eq!(m.is_descendant_or_equal(&pin[..7], &pin).unwrap(), None);
        }
    }

    #[test]
    fn only_a_commit_whose_tree_is_the_one_its_trailer_names_is_tagpins() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = Mirror::open(dir.path(), "file:///nowhere", Credentials::None).unwrap();
        let repo = mirror.repo();
        let bot = crate::config::Author {
            signing: None,
            name: "tagpin".into(),
            email: "tagpin@localhost".into(),
        };
        let empty = repo.treebuilder(None).unwrap().write().unwrap();
        let signature = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = repo.find_tree(empty).unwrap();
        let root = repo
            .commit(None, &signature, &signature, "root", &tree, &[])
            .unwrap();
        let file = |text: &str| vec![(PathBuf::from("a.yaml"), text.as_bytes().to_vec())];

        let own = mirror
            .commit_owned(root, &file("a: 1\n"), &bot, "Pin 1\n\nx\n")
            .unwrap();
        assert!(mirror.is_own_commit(own).unwrap());
        // The same message (trailer included) and identity over another tree: an amend.
        let message = repo
            .find_commit(own)
            .unwrap()
            .message()
            .unwrap()
            .to_string();
        assert!(message.ends_with(&format!(
            "\n\n{TREE_TRAILER}: {}\n",
            mirror.tree_with(root, &file("a: 1\n")).unwrap()
        )));
        let amended = mirror
            .commit(root, &file("a: 2\n"), &bot, &message)
            .unwrap();
        assert!(!mirror.is_own_commit(amended).unwrap());
        // A commit on top of tagpin's, and one without the trailer.
        let on_top = mirror.commit(own, &file("a: 3\n"), &bot, "fix").unwrap();
        assert!(!mirror.is_own_commit(on_top).unwrap());
        assert!(!mirror
            .is_own_commit(mirror.commit(root, &file("a: 1\n"), &bot, "Pin").unwrap())
            .unwrap());
        // A trailer that is not the last line, or names a shortened id, is not one.
        assert_eq!(
            tree_trailer(format!("{TREE_TRAILER}: {empty}\nmore").as_bytes()),
            None
        );
        assert_eq!(
            tree_trailer(format!("x\n\n{TREE_TRAILER}: {}", &empty.to_string()[..12]).as_bytes()),
            None
        );
        assert_eq!(
            tree_trailer(format!("x\n\n{TREE_TRAILER}: {empty}\n").as_bytes()),
            Some(empty)
        );
    }

    /// An unencrypted ed25519 signer, made for the test.
    fn test_signer() -> Arc<Signer> {
        let key = ssh_key::PrivateKey::random(&mut rand_core::OsRng, ssh_key::Algorithm::Ed25519)
            .unwrap()
            .to_openssh(ssh_key::LineEnding::LF)
            .unwrap();
        Arc::new(Signer::ssh(key.as_bytes(), None).unwrap())
    }

    #[test]
    fn with_signing_every_commit_is_signed_and_only_tagpins_signature_makes_it_own() {
        let dir = tempfile::tempdir().unwrap();
        let mut mirror = Mirror::open(dir.path(), "file:///nowhere", Credentials::None).unwrap();
        let root = {
            let repo = mirror.repo();
            let empty = repo.treebuilder(None).unwrap().write().unwrap();
            let signature = git2::Signature::now("t", "t@example.com").unwrap();
            let tree = repo.find_tree(empty).unwrap();
            repo.commit(None, &signature, &signature, "root", &tree, &[])
                .unwrap()
        };
        let bot = bot();
        let file = vec![(PathBuf::from("a.yaml"), b"a: 1\n".to_vec())];
        // Written before signing was configured: tagpin's by its shape alone.
        let unsigned = mirror.commit_owned(root, &file, &bot, "Pin 1").unwrap();
        assert!(mirror.is_own_commit(unsigned).unwrap());
        assert!(mirror.signature(unsigned).unwrap().is_none());

        let signer = test_signer();
        mirror.sign_with(Arc::clone(&signer));
        let signed = mirror.commit_owned(root, &file, &bot, "Pin 1").unwrap();
        let other = mirror.commit(root, &file, &bot, "by hand").unwrap();
        for commit in [signed, other] {
            let (signature, data) = mirror.signature(commit).unwrap().unwrap();
            assert!(signature.starts_with("-----BEGIN SSH SIGNATURE-----"));
            assert!(signer.public().verifies(&signature, &data));
        }
        assert!(mirror.is_own_commit(signed).unwrap());
        // The same shape without tagpin's signature, or signed with another key: not its own,
        // and its trailers are not believed.
        assert!(!mirror.is_own_commit(unsigned).unwrap());
        assert!(!mirror.is_trusted(unsigned).unwrap());
        let mut forger = Mirror::open(dir.path(), "file:///nowhere", Credentials::None).unwrap();
        forger.sign_with(test_signer());
        let forged = forger
            .commit_owned(root, &file, &bot, "Pin 1\n\nx")
            .unwrap();
        assert!(forger.is_own_commit(forged).unwrap());
        assert!(!mirror.is_own_commit(forged).unwrap());
        assert!(mirror.is_trusted(other).unwrap());
    }

    #[test]
    fn a_mirror_and_the_cache_it_creates_are_private_and_lock_files_left_behind_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("a/cache");
        let url = "https://example.com/a.git";
        let mirror = Mirror::open(&cache, url, Credentials::None).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let path = mirror.path.clone();
        assert_eq!(mode(&cache), PRIVATE_DIR_MODE);
        assert_eq!(mode(&path), PRIVATE_DIR_MODE);
        assert_eq!(mode(&mirror.lock_path), 0o600);
        drop(mirror);

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        for lock in ["packed-refs.lock", "refs/heads/x.lock", "objects/keep.lock"] {
            std::fs::write(path.join(lock), "").unwrap();
        }
        let mirror = Mirror::open(&cache, url, Credentials::None).unwrap();
        assert_eq!(mode(&path), PRIVATE_DIR_MODE);
        assert!(!path.join("packed-refs.lock").exists());
        assert!(!path.join("refs/heads/x.lock").exists());
        assert!(
            path.join("objects/keep.lock").exists(),
            "the object database is not walked"
        );

        // While one handle holds the mirror's lock, another cannot take it (even in this
        // process); once released, it can.
        let held = MirrorLock::acquire(&mirror.lock_path).unwrap();
        let other = File::open(&mirror.lock_path).unwrap();
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        drop(held);
        assert!(other.try_lock().is_ok());
    }

    #[test]
    fn a_mirror_that_is_not_a_repository_or_not_a_directory_is_recreated() {
        let dir = tempfile::tempdir().unwrap();
        let url = "https://example.com/a.git";
        let path = Mirror::open(dir.path(), url, Credentials::None)
            .unwrap()
            .path
            .clone();
        std::fs::remove_dir_all(path.join("objects")).unwrap();
        let reopened = Mirror::open(dir.path(), url, Credentials::None).unwrap();
        assert!(path.join("objects").is_dir());
        assert_eq!(reopened.take_repairs(), 1, "counted as a repair");
        assert_eq!(reopened.take_repairs(), 0, "once");
        let aside = PathBuf::from(format!("{}.damaged", path.display()));
        assert!(
            aside.is_dir() && !aside.join("objects").exists(),
            "moved aside"
        );
        std::fs::remove_dir_all(&path).unwrap();
        std::fs::write(path.to_str().unwrap().trim_end_matches('/'), "junk").unwrap();
        assert!(Mirror::open(dir.path(), url, Credentials::None).is_ok());
        assert!(path.join("HEAD").is_file());
    }

    #[test]
    fn damage_is_told_by_libgit2_class_and_code() {
        use git2::{ErrorClass as Class, ErrorCode as Code};
        // Not formatted, so that each row stays one line.
        #[rustfmt::skip]
        let table = [
            // An object a ref reaches, gone: damage; an id from elsewhere, gone: not yet fetched.
            (Class::Odb, Code::NotFound, true, Some(Damage::MissingObject)),
            (Class::Odb, Code::NotFound, false, None),
            (Class::Odb, Code::GenericError, false, Some(Damage::CorruptObject)),
            (Class::Odb, Code::HashsumMismatch, true, Some(Damage::CorruptObject)),
            (Class::Zlib, Code::GenericError, true, Some(Damage::CorruptObject)),
            (Class::Object, Code::GenericError, true, Some(Damage::CorruptObject)),
            (Class::Reference, Code::GenericError, true, Some(Damage::Reference)),
            (Class::Config, Code::GenericError, true, Some(Damage::Config)),
            // A prefix naming two objects, a missing or locked or moved ref, a bad name.
            (Class::Odb, Code::Ambiguous, true, None),
            (Class::Object, Code::Ambiguous, true, None),
            (Class::Reference, Code::NotFound, true, None),
            (Class::Reference, Code::Locked, true, None),
            (Class::Reference, Code::Modified, true, None),
            (Class::Reference, Code::InvalidSpec, true, None),
            (Class::Config, Code::NotFound, true, None),
            // A path not in a tree, the network, the remote's pack, the disk, an index.
            (Class::Tree, Code::NotFound, true, None),
            (Class::Net, Code::GenericError, true, None),
            (Class::Http, Code::Auth, true, None),
            (Class::Indexer, Code::GenericError, true, None),
            (Class::Os, Code::GenericError, true, None),
            (Class::Index, Code::GenericError, true, None),
        ];
        for (class, code, must_exist, expected) in table {
            assert_eq!(
                damage(class, code, must_exist),
                expected,
                "{class:?} {code:?} must_exist={must_exist}"
            );
        }
    }

    /// A bare repository on this machine with `apps/web.yaml`, `apps/notes.yaml` and
    /// `README.md` on `main`; its `file://` URL.
    fn remote(dir: &Path) -> String {
        let path = dir.join("remote.git");
        let repo = Repository::init_bare(&path).unwrap();
        let blob = |text: &str| repo.blob(text.as_bytes()).unwrap();
        let mut apps = repo.treebuilder(None).unwrap();
        apps.insert("web.yaml", blob("image: web:1\n"), 0o100644)
            .unwrap();
        apps.insert("notes.yaml", blob("kind: ConfigMap\n"), 0o100644)
            .unwrap();
        let apps = apps.write().unwrap();
        let mut root = repo.treebuilder(None).unwrap();
        root.insert("apps", apps, 0o040000).unwrap();
        root.insert("README.md", blob("# gitops\n"), 0o100644)
            .unwrap();
        let tree = repo.find_tree(root.write().unwrap()).unwrap();
        let signature = git2::Signature::now("t", "t@example.com").unwrap();
        repo.commit(
            Some("refs/heads/main"),
            &signature,
            &signature,
            "init",
            &tree,
            &[],
        )
        .unwrap();
        format!("file://{}", path.display())
    }

    const PREFIX: &str = "tagpin/";

    fn bot() -> crate::config::Author {
        crate::config::Author {
            signing: None,
            name: "tagpin".into(),
            email: "tagpin@localhost".into(),
        }
    }

    /// What a pass reads: fetch, the tip of `main`, the files under `apps`.
    fn read_apps(mirror: &Mirror) -> Result<Vec<String>, GitError> {
        mirror.fetch("main", PREFIX)?;
        let tip = mirror.require_tip("main")?;
        let filter = FileFilter::with_default_include(&[], &[]).unwrap();
        let read = mirror.read_files(tip, &["apps".to_string()], &filter)?;
        assert!(read.errors.is_empty(), "{:?}", read.errors);
        Ok(read
            .files
            .iter()
            .map(|f| format!("{}={}", f.path.display(), String::from_utf8_lossy(&f.bytes)))
            .collect())
    }

    #[test]
    fn a_fetch_asks_the_remote_for_its_refs_first_and_fetches_only_when_a_branch_moved() {
        let dir = tempfile::tempdir().unwrap();
        let url = remote(dir.path());
        let remote_repo = Repository::open_bare(dir.path().join("remote.git")).unwrap();
        let mirror = Mirror::open(&dir.path().join("cache"), &url, Credentials::None).unwrap();
        let listed = |fetches| Transfers {
            ref_listings: 1,
            fetches,
        };
        read_apps(&mirror).unwrap();
        assert_eq!(mirror.take_transfers(), listed(1), "the first pass fetches");
        read_apps(&mirror).unwrap();
        assert_eq!(mirror.take_transfers(), listed(0), "nothing moved");

        // Someone pushes to main: fetched, and read.
        let tip = remote_repo.refname_to_id("refs/heads/main").unwrap();
        let parent = remote_repo.find_commit(tip).unwrap();
        let blob = remote_repo.blob(b"image: web:2\n").unwrap();
        let apps = parent.tree().unwrap().get_path(Path::new("apps")).unwrap();
        let mut apps = remote_repo
            .treebuilder(Some(&remote_repo.find_tree(apps.id()).unwrap()))
            .unwrap();
        apps.insert("web.yaml", blob, 0o100644).unwrap();
        let apps = apps.write().unwrap();
        let mut root = remote_repo
            .treebuilder(Some(&parent.tree().unwrap()))
            .unwrap();
        root.insert("apps", apps, 0o040000).unwrap();
        let tree = remote_repo.find_tree(root.write().unwrap()).unwrap();
        let signature = git2::Signature::now("p", "p@example.com").unwrap();
        let moved = remote_repo
            .commit(
                Some("refs/heads/main"),
                &signature,
                &signature,
                "bump",
                &tree,
                &[&parent],
            )
            .unwrap();
        let read = read_apps(&mirror).unwrap();
        assert!(
            read.contains(&"apps/web.yaml=image: web:2\n".to_string()),
            "{read:?}"
        );
        assert_eq!(mirror.take_transfers(), listed(1));

        // A branch of tagpin's appears, then is deleted: each is fetched (the second prunes).
        let branch = format!("refs/heads/{PREFIX}web");
        remote_repo
            .reference(&branch, moved, false, "open")
            .unwrap();
        read_apps(&mirror).unwrap();
        assert_eq!(mirror.take_transfers(), listed(1));
        let tracked = format!("{REMOTE_PREFIX}{PREFIX}web");
        assert!(mirror.repo().find_reference(&tracked).is_ok());
        remote_repo
            .find_reference(&branch)
            .unwrap()
            .delete()
            .unwrap();
        read_apps(&mirror).unwrap();
        assert_eq!(mirror.take_transfers(), listed(1));
        assert!(mirror.repo().find_reference(&tracked).is_err(), "pruned");

        // A branch tagpin does not follow moves nothing.
        remote_repo
            .reference("refs/heads/feature", moved, false, "x")
            .unwrap();
        read_apps(&mirror).unwrap();
        assert_eq!(mirror.take_transfers(), listed(0));
    }

    /// A mirror of a fresh [`remote`] after one good pass that committed and pushed a pin, as
    /// a process left it: a pack from the first fetch, loose objects of tagpin's own commit.
    /// Returns the cache directory, the URL, and what the pass reads.
    fn mirror_after_one_pass(dir: &Path) -> (PathBuf, String, Vec<String>) {
        let url = remote(dir);
        let cache = dir.join("cache");
        let mirror = Mirror::open(&cache, &url, Credentials::None).unwrap();
        read_apps(&mirror).unwrap();
        let tip = mirror.require_tip("main").unwrap();
        let pin = vec![(
            PathBuf::from("apps/web.yaml"),
            b"image: web:1@sha256:0\n".to_vec(),
        )];
        let commit = mirror.commit(tip, &pin, &bot(), "Pin").unwrap();
        mirror
            .push(commit, "main", Expect::FastForwardFrom(tip))
            .unwrap();
        let read = read_apps(&mirror).unwrap();
        (cache, url, read)
    }

    /// Damage as a crash, a full disk or a killed fetch leaves it; the mirror is not open.
    fn damage_mirror(mirror: &Path, how: &str) {
        let packs: Vec<PathBuf> = std::fs::read_dir(mirror.join("objects/pack"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let with = |ext: &str| {
            let found: Vec<&PathBuf> = packs
                .iter()
                .filter(|p| p.extension().is_some_and(|e| e == ext))
                .collect();
            assert!(!found.is_empty(), "no .{ext} in {}", mirror.display());
            found
        };
        match how {
            "truncated pack" => {
                for pack in with("pack") {
                    let file = OpenOptions::new().write(true).open(pack).unwrap();
                    let len = file.metadata().unwrap().len();
                    file.set_len(len / 2).unwrap();
                }
            }
            "pack index removed" => {
                for index in with("idx") {
                    std::fs::remove_file(index).unwrap();
                }
            }
            "loose object removed" => {
                let repo = Repository::open_bare(mirror).unwrap();
                let tip = repo.refname_to_id("refs/remotes/origin/main").unwrap();
                let tree = repo.find_commit(tip).unwrap().tree().unwrap();
                let blob = tree.get_path(Path::new("apps/web.yaml")).unwrap().id();
                let hex = blob.to_string();
                let loose = mirror.join("objects").join(&hex[..2]).join(&hex[2..]);
                std::fs::remove_file(&loose).unwrap();
            }
            "loose ref overwritten" => {
                let head = mirror.join("refs/remotes/origin/main");
                assert!(head.is_file());
                std::fs::write(head, "garbage\n").unwrap();
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_damaged_mirror_is_found_damaged_moved_aside_and_cloned_again() {
        for (how, expected) in [
            ("truncated pack", Damage::MissingObject),
            ("pack index removed", Damage::MissingObject),
            ("loose object removed", Damage::MissingObject),
            ("loose ref overwritten", Damage::Reference),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let (cache, url, good) = mirror_after_one_pass(dir.path());
            let path = cache.join(mirror_dir_name(&url));
            damage_mirror(&path, how);

            let mirror = Mirror::open(&cache, &url, Credentials::None).unwrap();
            let found = read_apps(&mirror).unwrap_err();
            assert_eq!(found.damage(), Some(expected), "{how}: {found}");
            let message = found.to_string();
            assert!(
                message.contains(&path.display().to_string()) && message.contains(&url),
                "{how}: names the cache and what it caches: {message}"
            );
            let started = Instant::now();
            mirror.repair(found, "main", PREFIX).unwrap();
            eprintln!("{how}: repaired in {:?}", started.elapsed());

            assert_eq!(read_apps(&mirror).unwrap(), good, "{how}");
            assert_eq!(mirror.take_repairs(), 1, "{how}");
            assert!(PathBuf::from(format!("{}.damaged", path.display())).is_dir());
            // Another handle, as the next pass opens it, reads the fresh clone too.
            let next = Mirror::open(&cache, &url, Credentials::None).unwrap();
            assert_eq!(read_apps(&next).unwrap(), good, "{how}");
            assert_eq!(next.take_repairs(), 0, "{how}");
        }
    }

    #[test]
    fn a_file_the_tree_names_but_the_mirror_lacks_fails_the_read_and_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, url, _) = mirror_after_one_pass(dir.path());
        let path = cache.join(mirror_dir_name(&url));
        damage_mirror(&path, "loose object removed");
        let mirror = Mirror::open(&cache, &url, Credentials::None).unwrap();
        let tip = mirror.require_tip("main").unwrap();
        let filter = FileFilter::with_default_include(&[], &[]).unwrap();

        // Never a read of the other files alone.
        let read = mirror.read_files(tip, &["apps".to_string()], &filter);
        assert!(
            matches!(&read, Err(GitError::Damaged { message, .. }) if message.starts_with("apps/web.yaml: ")),
            "{:?}",
            read.map(|r| r.files.len())
        );
        let at = mirror.file_at(tip, Path::new("apps/web.yaml"));
        assert!(matches!(at, Err(GitError::Damaged { .. })), "{at:?}");
        assert_eq!(
            mirror.file_at(tip, Path::new("apps/none.yaml")).unwrap(),
            None
        );
    }

    #[test]
    fn a_tree_the_mirror_lacks_is_damage_not_a_configured_path_that_is_not_there() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, url, _) = mirror_after_one_pass(dir.path());
        let path = cache.join(mirror_dir_name(&url));
        let apps = {
            let repo = Repository::open_bare(&path).unwrap();
            let tip = repo.refname_to_id("refs/remotes/origin/main").unwrap();
            let tree = repo.find_commit(tip).unwrap().tree().unwrap();
            tree.get_path(Path::new("apps")).unwrap().id().to_string()
        };
        std::fs::remove_file(path.join("objects").join(&apps[..2]).join(&apps[2..])).unwrap();
        let mirror = Mirror::open(&cache, &url, Credentials::None).unwrap();
        let tip = mirror.require_tip("main").unwrap();
        let filter = FileFilter::with_default_include(&[], &[]).unwrap();

        for paths in [["apps"], ["."], ["apps/web.yaml"]] {
            let paths = paths.map(String::from);
            let read = mirror.read_files(tip, &paths, &filter);
            assert!(
                matches!(read, Err(GitError::Damaged { .. })),
                "{paths:?}: {:?}",
                read.map(|r| r.errors)
            );
        }
        // A configured path below the tree that is gone: neither there nor not there.
        let web = ["apps/web.yaml".to_string()];
        let missing = mirror.missing_paths(tip, &web);
        assert!(
            matches!(missing, Err(GitError::Damaged { .. })),
            "{missing:?}"
        );
        // Building a commit on that tree fails: no file is left out of it.
        let pin = vec![(PathBuf::from("apps/web.yaml"), b"x\n".to_vec())];
        let built = mirror.commit(tip, &pin, &bot(), "Pin");
        assert!(matches!(built, Err(GitError::Damaged { .. })), "{built:?}");
        // A path that is simply not there is still one.
        assert_eq!(
            mirror.missing_paths(tip, &["nowhere".to_string()]).unwrap(),
            [&"nowhere".to_string()]
        );
    }

    #[test]
    fn a_commit_named_by_no_ref_and_not_fetched_is_no_damage() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, url, _) = mirror_after_one_pass(dir.path());
        let mirror = Mirror::open(&cache, &url, Credentials::None).unwrap();
        let unknown = Oid::from_str(&"1".repeat(40)).unwrap();
        for error in [
            mirror.commit_time(unknown).unwrap_err(),
            mirror.messages(unknown, 5).unwrap_err(),
            mirror.changed_files(unknown).unwrap_err(),
            mirror.resolve_commit(&"1".repeat(40)).unwrap_err(),
        ] {
            assert_eq!(error.damage(), None, "{error}");
        }
    }

    #[test]
    fn a_remote_that_is_itself_damaged_is_named_and_an_empty_mirror_is_not_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let url = remote(dir.path());
        let remote_path = dir.path().join("remote.git");
        // The remote lost the blob of apps/web.yaml.
        let blob = {
            let repo = Repository::open_bare(&remote_path).unwrap();
            let tip = repo.refname_to_id("refs/heads/main").unwrap();
            let tree = repo.find_commit(tip).unwrap().tree().unwrap();
            tree.get_path(Path::new("apps/web.yaml"))
                .unwrap()
                .id()
                .to_string()
        };
        std::fs::remove_file(
            remote_path
                .join("objects")
                .join(&blob[..2])
                .join(&blob[2..]),
        )
        .unwrap();
        let cache = dir.path().join("cache");
        let mirror = Mirror::open(&cache, &url, Credentials::None).unwrap();

        let found = read_apps(&mirror).unwrap_err();
        let error = match found.damage() {
            Some(_) => mirror.repair(found, "main", PREFIX).unwrap_err(),
            None => found,
        };

        assert!(
            matches!(&error, GitError::RemoteDamaged { url: named, .. } if *named == url),
            "{error:?}"
        );
        assert!(
            error.to_string().starts_with(&format!("{url}: ")),
            "{error}"
        );
        assert!(!error.to_string().contains(&cache.display().to_string()));
        assert_eq!(mirror.take_repairs(), 0);
        let aside = format!("{}.damaged", cache.join(mirror_dir_name(&url)).display());
        assert!(!Path::new(&aside).exists());
    }

    #[test]
    fn of_two_processes_on_one_cache_the_first_repairs_and_the_second_reads_its_clone() {
        let dir = tempfile::tempdir().unwrap();
        let (cache, url, good) = mirror_after_one_pass(dir.path());
        let path = cache.join(mirror_dir_name(&url));
        damage_mirror(&path, "loose ref overwritten");
        // Two handles, each with its own lock file description, as two processes have.
        let first = Mirror::open(&cache, &url, Credentials::None).unwrap();
        let second = Mirror::open(&cache, &url, Credentials::None).unwrap();
        let (found_first, found_second) = (
            read_apps(&first).unwrap_err(),
            read_apps(&second).unwrap_err(),
        );

        // The second asks while the first holds the lock: it waits, then finds a directory
        // other than the one it opened, and reads that instead of moving it aside.
        let held = MirrorLock::acquire(&first.lock_path).unwrap();
        std::thread::scope(|scope| {
            let waiting = scope.spawn(|| {
                let second = second;
                second.repair(found_second, "main", PREFIX).unwrap();
                (read_apps(&second).unwrap(), second.take_repairs())
            });
            drop(held);
            first.repair(found_first, "main", PREFIX).unwrap();
            let (read, repairs) = waiting.join().unwrap();
            assert_eq!(read, good);
            assert_eq!(first.take_repairs() + repairs, 1, "moved aside once");
        });
        assert_eq!(read_apps(&first).unwrap(), good);
        let aside = PathBuf::from(format!("{}.damaged", path.display()));
        assert!(aside.is_dir());
        assert!(path.join("refs/remotes/origin/main").is_file());
    }

    #[test]
    fn mirror_directories_depend_only_on_the_url() {
        assert_eq!(
            mirror_dir_name("https://a/b.git"),
            mirror_dir_name("https://a/b.git")
        );
        assert_ne!(
            mirror_dir_name("https://a/b.git"),
            mirror_dir_name("https://a/c.git")
        );
    }
}
