//! The Git adapter: a local bare mirror of the GitOps repository, read and written through
//! git2 without ever checking out a working tree.
//!
//! Files are read straight from the tree of the target branch's tip, and a new commit is built
//! by replacing blobs in that tree, so tagpin never writes into (or follows a symlink out of) a
//! directory on disk: a symlink in the repository is a blob holding a path, and is skipped.
//! The mirror lives in a cache directory and is fetched, not cloned, on every pass.
//!
//! The mirror holds the manifests of a repository that may be private, so the cache directory
//! tagpin creates and every mirror in it are `0700`. Writes to a mirror (fetches, the push
//! ref) are made under an advisory lock on a file beside it ([`MirrorLock`]), so that lock
//! files git leaves behind when a process dies mid-write can be told from live ones and
//! removed: a crash never blocks the passes after it.

use std::cell::{Cell, RefCell};
use std::fs::{DirBuilder, File, OpenOptions, TryLockError};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{
    Direction, FetchOptions, FileMode, ObjectType, Oid, PushOptions, RemoteCallbacks, Repository,
};
use sha2::{Digest as _, Sha256};

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
    #[error("git: {0}")]
    Other(String),
}

/// How long libgit2 waits to connect to a remote, and for each read or write on the
/// connection once connected: a remote that stops answering fails the pass instead of hanging
/// it, while a large but moving transfer is never cut.
pub const CONNECT_TIMEOUT_MS: i32 = 15_000;
pub const IO_TIMEOUT_MS: i32 = 60_000;

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
pub fn off_runtime<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// The mode of the cache directory tagpin creates and of each mirror in it: only the user
/// running tagpin may read the manifests a mirror holds.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// How long a write to a mirror waits for another user of it (a second tagpin process on the
/// same cache directory, or the verifier of this one) to finish writing before failing.
pub const MIRROR_LOCK_WAIT: Duration = Duration::from_secs(600);
const MIRROR_LOCK_POLL: Duration = Duration::from_millis(50);

/// The trailer ending the message of every commit tagpin writes on its own branches: the id
/// of the tree it wrote. See [`Mirror::is_own_commit`].
pub const TREE_TRAILER: &str = "Tagpin-Tree";

/// Files by path with their content, as a commit writes them.
pub type Files = Vec<(PathBuf, Vec<u8>)>;

/// Files a commit changed, by path, with their content before and after.
pub type Changed = Vec<(PathBuf, Vec<u8>, Vec<u8>)>;

/// A local bare mirror of one remote.
pub struct Mirror {
    repo: Repository,
    url: String,
    credentials: Credentials,
    /// The file [`MirrorLock`] locks, beside the mirror in the cache directory.
    lock_path: PathBuf,
    limits: FetchLimits,
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
pub fn approximate_size(bytes: u64) -> String {
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
    /// Opens the mirror of `url` under `cache_dir`, creating both the first time (`0700`).
    ///
    /// A mirror left readable by others is tightened to `0700`; one that is no longer a
    /// repository is re-created (it is only a cache: the next fetch fills it again); lock
    /// files a killed process left in it are removed. Each is logged.
    pub fn open(cache_dir: &Path, url: &str, credentials: Credentials) -> Result<Mirror, GitError> {
        prepare_cache_dir(cache_dir)?;
        let name = mirror_dir_name(url);
        let path = cache_dir.join(&name);
        let lock_path = cache_dir.join(format!("{name}.flock"));
        let lock = MirrorLock::acquire(&lock_path)?;
        let repo = open_or_create(&path)?;
        remove_stale_locks(repo.path());
        drop(lock);
        Ok(Mirror {
            repo,
            url: url.to_string(),
            credentials,
            lock_path,
            limits: FetchLimits::default(),
        })
    }

    /// Bounds every later fetch into this mirror by `limits`.
    pub fn limit(&mut self, limits: FetchLimits) {
        self.limits = limits;
    }

    /// Removes a mirror that grew past its size limit: it is only a cache, and keeping it
    /// would keep the disk it took.
    fn discard_objects(&self) {
        let objects = self.repo.path().join("objects");
        if let Err(e) = std::fs::remove_dir_all(&objects) {
            tracing::warn!("{}: cannot remove: {e}", objects.display());
        }
    }

    /// The remote URL with any userinfo removed, for messages.
    pub fn display_url(&self) -> String {
        redact_url(&self.url)
    }

    /// Fetches `branch` and every branch under `prefix` (tagpin's own), pruning deleted ones.
    pub fn fetch(&self, branch: &str, prefix: &str) -> Result<(), GitError> {
        let _lock = MirrorLock::acquire(&self.lock_path)?;
        // Another process sharing the cache directory may have died mid-write since the open.
        remove_stale_locks(self.repo.path());
        let refspecs = [
            format!("+refs/heads/{branch}:{REMOTE_PREFIX}{branch}"),
            format!("+refs/heads/{prefix}*:{REMOTE_PREFIX}{prefix}*"),
        ];
        let mut remote = self
            .repo
            .remote_anonymous(&self.url)
            .map_err(|e| self.fetch_error(e))?;
        let attempts = Cell::new(0);
        let stopped = Cell::new(None);
        let held = match self.limits.max_bytes {
            Some(_) => dir_bytes(&self.repo.path().join("objects")),
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
            Some(_) if fetched.is_ok() => dir_bytes(&self.repo.path().join("objects")),
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
                self.discard_objects();
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
                self.discard_objects();
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
        self.prune_missing(&advertised, prefix);
        Ok(())
    }

    fn prune_missing(&self, advertised: &[String], prefix: &str) {
        let Ok(refs) = self
            .repo
            .references_glob(&format!("{REMOTE_PREFIX}{prefix}*"))
        else {
            return;
        };
        let names: Vec<String> = refs
            .flatten()
            .filter_map(|r| r.name().map(str::to_string))
            .collect();
        for name in names {
            let head = format!("refs/heads/{}", &name[REMOTE_PREFIX.len()..]);
            if !advertised.contains(&head) {
                if let Ok(mut r) = self.repo.find_reference(&name) {
                    let _ = r.delete();
                }
            }
        }
    }

    /// The fetched tip of a remote branch.
    pub fn tip(&self, branch: &str) -> Option<Oid> {
        self.repo
            .find_reference(&format!("{REMOTE_PREFIX}{branch}"))
            .ok()
            .and_then(|r| r.target())
    }

    /// Like [`Mirror::tip`], but a missing branch is an error naming it.
    pub fn require_tip(&self, branch: &str) -> Result<Oid, GitError> {
        self.tip(branch).ok_or_else(|| GitError::BranchMissing {
            url: self.display_url(),
            branch: branch.to_string(),
        })
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
        let object = self
            .repo
            .find_commit_by_prefix(text)
            .map_err(|e| GitError::Other(format!("commit {text}: {}", e.message())))?;
        Ok(object.id())
    }

    /// The entries of `paths` (as configured) that `commit` does not hold.
    pub fn missing_paths<'p>(
        &self,
        commit: Oid,
        paths: &'p [String],
    ) -> Result<Vec<&'p String>, GitError> {
        let tree = self
            .repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(other)?;
        Ok(missing_in(&tree, paths))
    }

    /// Reads the files under `paths` (relative to the root) in `commit`'s tree that `filter`
    /// accepts, for [`crate::pipeline::scan`]. Symlinks and submodules are skipped and
    /// reported, never followed; a configured path the tree does not hold is an error naming
    /// it (a typo in `paths:` must not look like an empty, converged repository).
    pub fn read_files(
        &self,
        commit: Oid,
        paths: &[String],
        filter: &FileFilter,
    ) -> Result<Gathered, GitError> {
        let tree = self
            .repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(other)?;
        let prefixes: Vec<String> = paths.iter().map(|p| path_prefix(p).to_string()).collect();
        let mut read = Gathered::default();
        for missing in missing_in(&tree, paths) {
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
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
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
                    match blob_size(&self.repo, entry.id()) {
                        Ok(size) if size > MAX_FILE_BYTES => {
                            read.errors.push(ManifestError::TooLarge {
                                path: PathBuf::from(&path),
                                size,
                                limit: MAX_FILE_BYTES,
                            });
                            return git2::TreeWalkResult::Ok;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            failure = Some(format!("{path}: {}", e.message()));
                            return git2::TreeWalkResult::Abort;
                        }
                    }
                    match self.repo.find_blob(entry.id()) {
                        Ok(blob) => read.files.push(SourceFile {
                            path: PathBuf::from(&path),
                            bytes: blob.content().to_vec(),
                        }),
                        Err(e) => {
                            failure = Some(format!("{path}: {}", e.message()));
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
        })
        .map_err(|e| {
            failure
                .clone()
                .map(GitError::Other)
                .unwrap_or_else(|| other(e))
        })?;
        if let Some(message) = failure {
            return Err(GitError::Other(message));
        }
        Ok(read)
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
        let mut tree = self
            .repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(other)?;
        for (i, part) in parts.iter().enumerate() {
            let Some((kind, id, link)) = tree.get_name_bytes(part.as_encoded_bytes()).map(|e| {
                let link = e.filemode() == i32::from(FileMode::Link);
                (e.kind(), e.id(), link)
            }) else {
                return Ok(Lookup::Missing);
            };
            match kind {
                _ if link => return Ok(Lookup::Symlink),
                Some(ObjectType::Tree) => tree = self.repo.find_tree(id).map_err(other)?,
                Some(ObjectType::Blob) if i + 1 == parts.len() => {
                    if blob_size(&self.repo, id).map_err(other)? > MAX_FILE_BYTES {
                        return Ok(Lookup::Refused(format!(
                            "{}: larger than {MAX_FILE_BYTES} bytes",
                            path.display()
                        )));
                    }
                    let blob = self.repo.find_blob(id).map_err(other)?;
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
    pub fn commit_owned(
        &self,
        parent: Oid,
        files: &[(PathBuf, Vec<u8>)],
        author: &crate::config::Author,
        message: &str,
    ) -> Result<Oid, GitError> {
        let tree_id = self.tree_with(parent, files)?;
        let message = format!("{}\n\n{TREE_TRAILER}: {tree_id}\n", message.trim_end());
        self.commit_tree(parent, tree_id, author, &message)
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
    pub fn is_own_commit(&self, commit: Oid) -> Result<bool, GitError> {
        let c = self.repo.find_commit(commit).map_err(other)?;
        Ok(c.parent_count() == 1 && tree_trailer(c.message_bytes()) == Some(c.tree_id()))
    }

    fn commit_tree(
        &self,
        parent: Oid,
        tree_id: Oid,
        author: &crate::config::Author,
        message: &str,
    ) -> Result<Oid, GitError> {
        let tree = self.repo.find_tree(tree_id).map_err(other)?;
        let parent = self.repo.find_commit(parent).map_err(other)?;
        let signature = git2::Signature::now(&author.name, &author.email).map_err(other)?;
        self.repo
            .commit(None, &signature, &signature, message, &tree, &[&parent])
            .map_err(other)
    }

    /// The tree `parent`'s tree becomes with `files` replaced (each keeps its file mode).
    pub fn tree_with(&self, parent: Oid, files: &[(PathBuf, Vec<u8>)]) -> Result<Oid, GitError> {
        let base = self
            .repo
            .find_commit(parent)
            .and_then(|c| c.tree())
            .map_err(other)?;
        let mut update = git2::build::TreeUpdateBuilder::new();
        for (path, bytes) in files {
            let blob = self.repo.blob(bytes).map_err(other)?;
            let executable = base
                .get_path(path)
                .is_ok_and(|e| e.filemode() == i32::from(FileMode::BlobExecutable));
            let mode = if executable {
                FileMode::BlobExecutable
            } else {
                FileMode::Blob
            };
            update.upsert(path_str(path)?, blob, mode);
        }
        update.create_updated(&self.repo, &base).map_err(other)
    }

    /// `commit` and up to `max - 1` of its first-parent ancestors, newest first: the history
    /// of a branch as its merges made it.
    pub fn first_parents(&self, commit: Oid, max: usize) -> Result<Vec<Oid>, GitError> {
        let mut out = Vec::new();
        let mut current = self.repo.find_commit(commit).map_err(other)?;
        loop {
            out.push(current.id());
            if out.len() >= max {
                return Ok(out);
            }
            match current.parent(0) {
                Ok(parent) => current = parent,
                Err(_) => return Ok(out),
            }
        }
    }

    /// The newest of `commit` and its first-parent ancestors (at most `max`) that tagpin
    /// wrote ([`Mirror::is_own_commit`]), with its committer time and message: what tagpin
    /// pinned last, read back from Git when nothing recorded it (a controller stopped between
    /// its push and its status write).
    pub fn last_own_commit(
        &self,
        commit: Oid,
        max: usize,
    ) -> Result<Option<(Oid, i64, String)>, GitError> {
        for id in self.first_parents(commit, max)? {
            if self.is_own_commit(id)? {
                let c = self.repo.find_commit(id).map_err(other)?;
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
    pub fn changed_files_within(
        &self,
        commit: Oid,
        only: Option<&Path>,
        max: usize,
    ) -> Result<Option<Changed>, GitError> {
        let c = self.repo.find_commit(commit).map_err(other)?;
        // A root commit adds every file: not a change of fields.
        let Ok(parent) = c.parent(0) else {
            return Ok(None);
        };
        let (old, new) = (parent.tree().map_err(other)?, c.tree().map_err(other)?);
        let mut options = git2::DiffOptions::new();
        if let Some(only) = only {
            options
                .pathspec(path_str(only)?)
                .disable_pathspec_match(true);
        }
        let diff = self
            .repo
            .diff_tree_to_tree(Some(&old), Some(&new), Some(&mut options))
            .map_err(other)?;
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
            let blob = |id| self.repo.find_blob(id).map(|b| b.content().to_vec());
            let before = blob(delta.old_file().id()).map_err(other)?;
            let after = blob(delta.new_file().id()).map_err(other)?;
            out.push((path.to_path_buf(), before, after));
        }
        Ok(Some(out))
    }

    /// The content of each of `paths` after `git revert <commit>` on top of `onto` (a merge is
    /// reverted against its first parent). `None` when the revert does not apply cleanly (a
    /// later commit changed the same lines) or leaves one of `paths` out: nothing is
    /// reverted then.
    pub fn revert_files(
        &self,
        commit: Oid,
        onto: Oid,
        paths: &[&Path],
    ) -> Result<Option<Files>, GitError> {
        let c = self.repo.find_commit(commit).map_err(other)?;
        let onto = self.repo.find_commit(onto).map_err(other)?;
        let mainline = if c.parent_count() > 1 { 1 } else { 0 };
        let index = self
            .repo
            .revert_commit(&c, &onto, mainline, None)
            .map_err(other)?;
        if index.has_conflicts() {
            return Ok(None);
        }
        let mut out = Vec::new();
        for path in paths {
            let Some(entry) = index.get_path(path, 0) else {
                return Ok(None);
            };
            let blob = self.repo.find_blob(entry.id).map_err(other)?;
            out.push((path.to_path_buf(), blob.content().to_vec()));
        }
        Ok(Some(out))
    }

    /// The content of `path` in `commit`'s tree, if it is a file there.
    pub fn file_at(&self, commit: Oid, path: &Path) -> Result<Option<Vec<u8>>, GitError> {
        let tree = self
            .repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(other)?;
        let Ok(entry) = tree.get_path(path) else {
            return Ok(None);
        };
        match self.repo.find_blob(entry.id()) {
            Ok(blob) => Ok(Some(blob.content().to_vec())),
            Err(_) => Ok(None),
        }
    }

    /// The messages of `commit` and its ancestors (every parent, newest first, at most
    /// `max`): where tagpin's trailers are read back from.
    pub fn messages(&self, commit: Oid, max: usize) -> Result<Vec<(Oid, String)>, GitError> {
        let mut walk = self.repo.revwalk().map_err(other)?;
        walk.push(commit).map_err(other)?;
        walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::TIME)
            .map_err(other)?;
        let mut out = Vec::new();
        for id in walk.take(max) {
            let id = id.map_err(other)?;
            let c = self.repo.find_commit(id).map_err(other)?;
            out.push((id, String::from_utf8_lossy(c.message_bytes()).into_owned()));
        }
        Ok(out)
    }

    /// The commits of `commit`'s whole history (every ancestor, newest first) whose message
    /// contains `needle`, with their messages: where trailers that must not wear off by
    /// commit count are read back from. Only the matching messages are kept.
    pub fn messages_mentioning(
        &self,
        commit: Oid,
        needle: &str,
    ) -> Result<Vec<(Oid, String)>, GitError> {
        let mut walk = self.repo.revwalk().map_err(other)?;
        walk.push(commit).map_err(other)?;
        walk.set_sorting(git2::Sort::TIME).map_err(other)?;
        let needle = needle.as_bytes();
        let mut out = Vec::new();
        for id in walk {
            let id = id.map_err(other)?;
            let c = self.repo.find_commit(id).map_err(other)?;
            let message = c.message_bytes();
            if message.windows(needle.len()).any(|w| w == needle) {
                out.push((id, String::from_utf8_lossy(message).into_owned()));
            }
        }
        Ok(out)
    }

    /// When a commit was made (committer time, Unix seconds): how long the GitOps tool has had
    /// to apply it.
    pub fn commit_time(&self, commit: Oid) -> Result<i64, GitError> {
        let c = self.repo.find_commit(commit).map_err(other)?;
        let seconds = c.committer().when().seconds();
        Ok(seconds)
    }

    /// The tree and first parent of a commit, to tell whether a branch already holds a change.
    pub fn tree_and_parent(&self, commit: Oid) -> Result<(Oid, Option<Oid>), GitError> {
        let c = self.repo.find_commit(commit).map_err(other)?;
        Ok((c.tree_id(), c.parent_ids().next()))
    }

    /// Another handle on the same mirror, for work that outlives the borrow of this one (the
    /// verifier asks about GitOps revisions at every check). A `Repository` cannot be shared
    /// between threads, but two handles on one directory can be used side by side.
    pub fn try_clone(&self) -> Result<Mirror, GitError> {
        let repo = Repository::open_bare(self.repo.path()).map_err(|e| GitError::Mirror {
            path: self.repo.path().to_path_buf(),
            message: e.message().to_string(),
        })?;
        Ok(Mirror {
            repo,
            url: self.url.clone(),
            credentials: self.credentials.clone(),
            lock_path: self.lock_path.clone(),
            limits: self.limits,
        })
    }

    /// Whether commit `candidate` is `ancestor` or comes after it (`git merge-base
    /// --is-ancestor ancestor candidate`): a GitOps tool that applied `candidate` applied
    /// everything `ancestor` changed. `None` when the mirror does not hold one of them (yet: a
    /// fetch may bring it), or either is not a commit id.
    pub fn is_descendant_or_equal(
        &self,
        candidate: &str,
        ancestor: &str,
    ) -> Result<Option<bool>, GitError> {
        let commit = |text: &str| {
            Oid::from_str(text)
                .ok()
                .filter(|_| text.len() == 40 || text.len() == 64)
                .filter(|oid| self.repo.find_commit(*oid).is_ok())
        };
        let (Some(candidate), Some(ancestor)) = (commit(candidate), commit(ancestor)) else {
            return Ok(None);
        };
        if candidate == ancestor {
            return Ok(Some(true));
        }
        self.repo
            .graph_descendant_of(candidate, ancestor)
            .map(Some)
            .map_err(other)
    }

    /// Pushes `commit` to `branch`, on the condition `expect` states.
    pub fn push(&self, commit: Oid, branch: &str, expect: Expect) -> Result<(), GitError> {
        // The push ref is written into the mirror.
        let _lock = MirrorLock::acquire(&self.lock_path)?;
        if let Some(path) = local_path(&self.url) {
            return self.push_local(&path, commit, branch, expect);
        }
        let mut remote = self
            .repo
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
        let c = self.repo.find_commit(commit)?;
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
        for entry in self.repo.find_tree(tree)?.iter() {
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
        let source = self.repo.odb()?;
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
        self.repo
            .reference(PUSH_REF, commit, true, "tagpin push")
            .map_err(other)?;
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

    fn fetch_error(&self, e: git2::Error) -> GitError {
        let url = self.display_url();
        let message = scrub(e.message(), &self.credentials);
        if e.code() == git2::ErrorCode::Auth
            || e.class() == git2::ErrorClass::Http && message.contains("401")
        {
            GitError::Auth { url, message }
        } else {
            GitError::Fetch { url, message }
        }
    }

    fn push_error(&self, e: git2::Error) -> GitError {
        let url = self.display_url();
        let message = scrub(e.message(), &self.credentials);
        if e.code() == git2::ErrorCode::Auth {
            GitError::Auth { url, message }
        } else {
            GitError::Push { url, message }
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

/// The ref moved (or appeared) under us, or another writer holds its lock right now: a
/// compare-and-swap lost, and the pass is planned again.
/// A configured path as a prefix of tree paths: `./apps/` is `apps`, `.` is the root (empty).
fn path_prefix(path: &str) -> &str {
    match path.trim_start_matches("./").trim_end_matches('/') {
        "." => "",
        prefix => prefix,
    }
}

/// The entries of `paths` that `tree` does not hold (the root always exists).
fn missing_in<'p>(tree: &git2::Tree<'_>, paths: &'p [String]) -> Vec<&'p String> {
    paths
        .iter()
        .filter(|p| {
            let prefix = path_prefix(p);
            !prefix.is_empty() && tree.get_path(Path::new(prefix)).is_err()
        })
        .collect()
}

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
/// fail every pass). Never follows a symlink at `path`: that is removed, not its target.
fn open_or_create(path: &Path) -> Result<Repository, GitError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return create_mirror(path),
        Err(e) => return Err(mirror_error(path, e.to_string())),
        Ok(meta) if !meta.is_dir() => {
            tracing::warn!(
                "git mirror {}: not a directory; re-creating it",
                path.display()
            );
            std::fs::remove_file(path).map_err(|e| mirror_error(path, e.to_string()))?;
            return create_mirror(path);
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
        Ok(repo) => Ok(repo),
        Err(e) => {
            tracing::warn!(
                "git mirror {}: not a usable repository ({}); re-creating it, the next fetch fills it again",
                path.display(),
                e.message()
            );
            std::fs::remove_dir_all(path).map_err(|e| mirror_error(path, e.to_string()))?;
            create_mirror(path)
        }
    }
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
pub fn redact_url(url: &str) -> String {
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
        let repo = &mirror.repo;
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
        let repo = &mirror.repo;
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
        let repo = &mirror.repo;
        let bot = crate::config::Author {
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

    #[test]
    fn a_mirror_and_the_cache_it_creates_are_private_and_lock_files_left_behind_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("a/cache");
        let url = "https://example.com/a.git";
        let mirror = Mirror::open(&cache, url, Credentials::None).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let path = mirror.repo.path().to_path_buf();
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
            .repo
            .path()
            .to_path_buf();
        std::fs::remove_dir_all(path.join("objects")).unwrap();
        assert!(Mirror::open(dir.path(), url, Credentials::None).is_ok());
        assert!(path.join("objects").is_dir());
        std::fs::remove_dir_all(&path).unwrap();
        std::fs::write(path.to_str().unwrap().trim_end_matches('/'), "junk").unwrap();
        assert!(Mirror::open(dir.path(), url, Credentials::None).is_ok());
        assert!(path.join("HEAD").is_file());
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
