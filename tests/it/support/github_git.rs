//! The Git Data API of the test GitHub server (blobs, trees, commits, refs), over the same
//! bare repository the server's branches come from, written with the real `git` binary.
//!
//! As GitHub does, a commit made through `POST /git/commits` without a `signature` is signed
//! by GitHub itself (its "web-flow" key): here an SSH key the server makes at start, so a
//! test can check the signature with `git verify-commit` and the key
//! ([`GitHubServer::web_flow_allowed_signers`]). Refs move only as GitHub lets them: a
//! `PATCH` without `force` must be a fast-forward (else 422 "Update is not a fast forward"),
//! a `POST /git/refs` may not replace a ref (422 "Reference already exists").

use std::path::{Path, PathBuf};
use std::process::Stdio;

use axum::http::StatusCode;
use base64::Engine;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::{error_body, is_ancestor, not_found_message, Incoming, Inner, Operation, Reply};

/// The login the server's commits name as committer, as GitHub's web-flow commits do.
const WEB_FLOW_NAME: &str = "GitHub";
const WEB_FLOW_EMAIL: &str = "noreply@github.com";

/// The server's signing key ("web-flow"), made once per server.
pub(super) struct WebFlow {
    pub key: PathBuf,
    _dir: tempfile::TempDir,
}

impl WebFlow {
    pub fn new() -> WebFlow {
        let dir = tempfile::tempdir().expect("web-flow key dir");
        let key = dir.path().join("web-flow");
        let status = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", WEB_FLOW_EMAIL, "-f"])
            .arg(&key)
            .status()
            .expect("run ssh-keygen (is openssh-client installed?)");
        assert!(status.success(), "ssh-keygen failed");
        WebFlow { key, _dir: dir }
    }

    /// An allowed-signers line for `gpg.ssh.allowedSignersFile`.
    pub fn allowed_signers(&self) -> String {
        let public = std::fs::read_to_string(self.key.with_extension("pub")).expect("public key");
        let mut parts = public.split_whitespace();
        let (kind, key) = (parts.next().unwrap(), parts.next().unwrap());
        format!("{WEB_FLOW_EMAIL} {kind} {key}\n")
    }
}

async fn git(git_dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Result<String, String> {
    let mut command = tokio::process::Command::new("git");
    command
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("run git");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(bytes).await.expect("write git stdin");
        drop(pipe);
    }
    let out = child.wait_with_output().await.expect("wait for git");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

async fn object_type(git_dir: &Path, sha: &str) -> Option<String> {
    if sha.len() != 40 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    git(git_dir, &["cat-file", "-t", sha], None).await.ok()
}

fn unprocessable(op: &Operation, message: &str) -> Reply {
    Reply::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        error_body(422, message, &op.documentation_url),
    )
}

/// `POST /repos/{owner}/{repo}/git/blobs`.
pub(super) async fn create_blob(inner: &Inner, op: &Operation, req: &Incoming) -> Reply {
    let content = req.body["content"].as_str().unwrap_or_default();
    let bytes = match req.body["encoding"].as_str().unwrap_or("utf-8") {
        "base64" => match base64::engine::general_purpose::STANDARD.decode(content) {
            Ok(bytes) => bytes,
            Err(_) => return unprocessable(op, "content is not valid Base64"),
        },
        "utf-8" => content.as_bytes().to_vec(),
        other => return unprocessable(op, &format!("encoding {other} is not supported")),
    };
    let args = ["hash-object", "-w", "--stdin"];
    let sha = git(&inner.git_dir, &args, Some(&bytes))
        .await
        .expect("hash-object");
    let url = format!("{}/git/blobs/{sha}", inner.repo_api());
    Reply::new(op.success_status, json!({"url": url, "sha": sha}))
}

/// `POST /repos/{owner}/{repo}/git/trees`: `base_tree` with the entries set, replaced or
/// (`sha: null`) removed, nested paths included.
pub(super) async fn create_tree(inner: &Inner, op: &Operation, req: &Incoming) -> Reply {
    let index = tempfile::NamedTempFile::new().expect("index file");
    let index_path = index.path().to_path_buf();
    drop(index);
    let with_index = |args: Vec<String>, stdin: Option<Vec<u8>>| {
        let git_dir = inner.git_dir.clone();
        let index_path = index_path.clone();
        async move {
            let mut command = tokio::process::Command::new("git");
            command
                .arg("--git-dir")
                .arg(&git_dir)
                .args(&args)
                .env("GIT_INDEX_FILE", &index_path)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = command.spawn().expect("run git");
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(&stdin.unwrap_or_default()).await.unwrap();
            drop(pipe);
            let out = child.wait_with_output().await.expect("git");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).trim().to_string(),
            )
        }
    };
    if let Some(base) = req.body["base_tree"].as_str() {
        if object_type(&inner.git_dir, base).await.as_deref() != Some("tree") {
            return unprocessable(op, "base_tree is not a valid tree oid");
        }
        with_index(vec!["read-tree".into(), base.into()], None).await;
    } else {
        with_index(vec!["read-tree".into(), "--empty".into()], None).await;
    }
    let mut infos = Vec::new();
    for entry in req.body["tree"].as_array().into_iter().flatten() {
        let path = entry["path"].as_str().unwrap_or_default();
        let mode = entry["mode"].as_str().unwrap_or("100644");
        if path.is_empty()
            || path.starts_with('/')
            || path.split('/').any(|p| p == ".." || p.is_empty())
        {
            return unprocessable(op, &format!("tree.path {path:?} is not valid"));
        }
        match &entry["sha"] {
            Value::Null if entry.get("content").is_none() => {
                // Removal: a path missing from the base is a 422 on GitHub too.
                let (ok, _) = with_index(
                    vec![
                        "update-index".into(),
                        "--force-remove".into(),
                        "--".into(),
                        path.into(),
                    ],
                    None,
                )
                .await;
                assert!(ok, "update-index --force-remove");
                continue;
            }
            Value::String(sha) => {
                if object_type(&inner.git_dir, sha).await.as_deref() != Some("blob") {
                    return unprocessable(op, &format!("tree.sha {sha} is not a valid blob"));
                }
                infos.push(format!("{mode} {sha}\t{path}\n"));
            }
            _ => {
                let content = entry["content"].as_str().unwrap_or_default();
                let args = ["hash-object", "-w", "--stdin"];
                let sha = git(&inner.git_dir, &args, Some(content.as_bytes()))
                    .await
                    .unwrap();
                infos.push(format!("{mode} {sha}\t{path}\n"));
            }
        }
    }
    let args = vec!["update-index".into(), "--add".into(), "--index-info".into()];
    let (ok, _) = with_index(args, Some(infos.concat().into_bytes())).await;
    assert!(ok, "update-index --index-info");
    let (ok, sha) = with_index(vec!["write-tree".into()], None).await;
    assert!(ok, "write-tree");
    let _ = std::fs::remove_file(&index_path);
    let url = format!("{}/git/trees/{sha}", inner.repo_api());
    Reply::new(
        op.success_status,
        json!({"sha": sha, "url": url, "tree": [], "truncated": false}),
    )
}

/// `POST /repos/{owner}/{repo}/git/commits`: with no `signature`, signed by the server's
/// web-flow key, as GitHub signs a commit it makes for an app or a user.
pub(super) async fn create_commit(inner: &Inner, op: &Operation, req: &Incoming) -> Reply {
    let tree = req.body["tree"].as_str().unwrap_or_default();
    if object_type(&inner.git_dir, tree).await.as_deref() != Some("tree") {
        return unprocessable(op, "Tree SHA does not exist");
    }
    let mut args: Vec<String> = Vec::new();
    let signed = req.body.get("signature").is_none();
    if signed {
        args.extend([
            "-c".into(),
            "gpg.format=ssh".into(),
            "-c".into(),
            format!("user.signingkey={}", inner.web_flow.key.display()),
        ]);
    }
    args.extend(["commit-tree".into(), tree.into()]);
    for parent in req.body["parents"].as_array().into_iter().flatten() {
        let parent = parent.as_str().unwrap_or_default();
        if object_type(&inner.git_dir, parent).await.as_deref() != Some("commit") {
            return unprocessable(op, "Parent SHA does not exist or is not a commit object");
        }
        args.extend(["-p".into(), parent.into()]);
    }
    if signed {
        args.push("-S".into());
    }
    let author = &req.body["author"];
    let now = inner.now();
    // Git's own date form, the same instant as `now`.
    let git_date = format!("{} +0000", inner.unix_now());
    let name = author["name"].as_str().unwrap_or(super::TOKEN_USER_LOGIN);
    let email = author["email"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}@users.noreply.github.com", super::TOKEN_USER_LOGIN));
    let message = req.body["message"].as_str().unwrap_or_default();
    let mut command = tokio::process::Command::new("git");
    command
        .arg("--git-dir")
        .arg(&inner.git_dir)
        .args(&args)
        .env("GIT_AUTHOR_NAME", name)
        .env("GIT_AUTHOR_EMAIL", &email)
        .env("GIT_AUTHOR_DATE", &git_date)
        .env("GIT_COMMITTER_NAME", WEB_FLOW_NAME)
        .env("GIT_COMMITTER_EMAIL", WEB_FLOW_EMAIL)
        .env("GIT_COMMITTER_DATE", &git_date)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("git commit-tree");
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(message.as_bytes()).await.unwrap();
    drop(pipe);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "commit-tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut answer = op.example.clone();
    answer["sha"] = json!(sha);
    answer["url"] = json!(format!("{}/git/commits/{sha}", inner.repo_api()));
    answer["html_url"] = json!(format!("{}/commit/{sha}", inner.repo_html()));
    answer["message"] = json!(message);
    answer["tree"] = json!({"sha": tree, "url": format!("{}/git/trees/{tree}", inner.repo_api())});
    answer["author"] = json!({"name": name, "email": email, "date": now});
    answer["committer"] = json!({"name": WEB_FLOW_NAME, "email": WEB_FLOW_EMAIL, "date": now});
    answer["parents"] = json!(req.body["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| json!({"sha": p, "url": format!("{}/git/commits/{}", inner.repo_api(), p.as_str().unwrap_or_default()), "html_url": format!("{}/commit/{}", inner.repo_html(), p.as_str().unwrap_or_default())}))
        .collect::<Vec<_>>());
    answer["verification"] = json!({
        "verified": signed,
        "reason": if signed { "valid" } else { "unsigned" },
        "signature": null, "payload": null, "verified_at": if signed { json!(now) } else { Value::Null },
    });
    Reply::new(op.success_status, answer)
}

fn ref_json(inner: &Inner, op: &Operation, name: &str, sha: &str) -> Value {
    let mut answer = op.example.clone();
    answer["ref"] = json!(name);
    answer["url"] = json!(format!("{}/git/{name}", inner.repo_api()));
    answer["object"] = json!({"type": "commit", "sha": sha,
        "url": format!("{}/git/commits/{sha}", inner.repo_api())});
    answer
}

fn valid_branch_ref(name: &str) -> bool {
    name.strip_prefix("refs/heads/").is_some_and(|b| {
        !b.is_empty() && !b.contains("..") && !b.ends_with('/') && !b.starts_with('-')
    })
}

/// `GET /repos/{owner}/{repo}/git/ref/{ref}` (`ref` is `heads/<branch>`).
pub(super) async fn get_ref(inner: &Inner, op: &Operation, reference: &str) -> Reply {
    let name = format!("refs/{reference}");
    match super::rev_parse(inner, &name).await {
        Some(sha) if valid_branch_ref(&name) => {
            Reply::new(op.success_status, ref_json(inner, op, &name, &sha))
        }
        _ => not_found_message("Not Found"),
    }
}

/// `POST /repos/{owner}/{repo}/git/refs`.
pub(super) async fn create_ref(inner: &Inner, op: &Operation, req: &Incoming) -> Reply {
    let name = req.body["ref"].as_str().unwrap_or_default().to_string();
    let sha = req.body["sha"].as_str().unwrap_or_default().to_string();
    if !valid_branch_ref(&name) {
        return unprocessable(
            op,
            "Reference name must start with 'refs/' and have at least two slashes.",
        );
    }
    if object_type(&inner.git_dir, &sha).await.as_deref() != Some("commit") {
        return unprocessable(op, "Object does not exist");
    }
    // An empty old value: created only where nothing is.
    match git(&inner.git_dir, &["update-ref", &name, &sha, ""], None).await {
        Ok(_) => Reply::new(op.success_status, ref_json(inner, op, &name, &sha)),
        Err(_) => unprocessable(op, "Reference already exists"),
    }
}

/// `PATCH /repos/{owner}/{repo}/git/refs/{ref}`: a fast-forward unless `force`.
pub(super) async fn update_ref(
    inner: &Inner,
    op: &Operation,
    reference: &str,
    req: &Incoming,
) -> Reply {
    let name = format!("refs/{reference}");
    let sha = req.body["sha"].as_str().unwrap_or_default().to_string();
    let force = req.body["force"].as_bool().unwrap_or(false);
    let Some(old) = super::rev_parse(inner, &name)
        .await
        .filter(|_| valid_branch_ref(&name))
    else {
        return unprocessable(op, "Reference does not exist");
    };
    if object_type(&inner.git_dir, &sha).await.as_deref() != Some("commit") {
        return unprocessable(op, "Object does not exist");
    }
    if !force && !is_ancestor(inner, &old, &sha).await {
        return unprocessable(op, "Update is not a fast forward");
    }
    // Compare-and-swap on what was checked, as GitHub's ref update is atomic.
    match git(&inner.git_dir, &["update-ref", &name, &sha, &old], None).await {
        Ok(_) => Reply::new(op.success_status, ref_json(inner, op, &name, &sha)),
        Err(_) => unprocessable(op, "Update is not a fast forward"),
    }
}
