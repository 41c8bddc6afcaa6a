//! `promotion.require_signed_by` (issue #40): a stage's digests are promoted from it only
//! when the commit that pinned them there is signed by one of the listed keys (SSH or
//! OpenPGP public keys), so that a digest pushed into staging by anyone who may push, by hand
//! or through a forged tagpin commit, never reaches the next stage.
//!
//! The pinning commit is found along the branch's history ([`pinning_commit`]): the newest
//! commit whose source-stage digests are the tip's and whose parents' are not. A merge that
//! brought them from its other side is followed into that side, so in pull-request mode the
//! commit checked is the one on tagpin's branch, not the forge's merge commit.

use crate::config::SignatureFile;
use crate::git::{GitError, Mirror};
use crate::signing::{PublicKey, SigningError};

/// How many commits back the pinning commit is looked for. The walk reads a stage's files
/// only at commits that changed them, so this is cheap; a pinning commit further back is not
/// checked, and the promotion is refused (it cannot be shown to be signed).
pub(crate) const PIN_SEARCH_DEPTH: usize = 1_000;

/// The keys `promotion.require_signed_by` lists, parsed, each with the path it was given as.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequiredSigners {
    keys: Vec<(String, PublicKey)>,
}

impl RequiredSigners {
    /// Parses every key (checked at load already; a Secret's are checked when read).
    pub fn compile(files: &[SignatureFile]) -> Result<RequiredSigners, (String, SigningError)> {
        let keys = files
            .iter()
            .map(|file| {
                PublicKey::parse(&file.contents)
                    .map(|key| (file.path.clone(), key))
                    .map_err(|e| (file.path.clone(), e))
            })
            .collect::<Result<_, _>>()?;
        Ok(RequiredSigners { keys })
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Why `commit`, the commit that pinned the digests of stage `stage`, may not be promoted
    /// from (naming it and who signed it, if anyone), or `None` when one of the keys verifies
    /// its signature.
    pub fn refusal(
        &self,
        mirror: &Mirror,
        stage: &str,
        commit: git2::Oid,
    ) -> Result<Option<String>, GitError> {
        let signature = mirror.signature(commit)?;
        if let Some((signature, signed)) = &signature {
            if self
                .keys
                .iter()
                .any(|(_, key)| key.verifies(signature, signed))
            {
                return Ok(None);
            }
        }
        let who = match &signature {
            None => "it is not signed".to_string(),
            Some((signature, _)) => match crate::signing::signed_by(signature) {
                Some(by) => format!("it is signed by {by}"),
                None => "its signature cannot be read".to_string(),
            },
        };
        Ok(Some(refusal_text(
            stage,
            &commit.to_string(),
            &who,
            &self.paths(),
        )))
    }

    fn paths(&self) -> Vec<&str> {
        self.keys.iter().map(|(path, _)| path.as_str()).collect()
    }
}

/// The refusal in one sentence.
fn refusal_text(stage: &str, commit: &str, who: &str, keys: &[&str]) -> String {
    format!(
        "stage {stage}: commit {commit}, which pinned its digests, is not signed by a key \
         promotion.require_signed_by lists ({}): {who}; not promoted",
        keys.join(", ")
    )
}

/// The commit that pinned the digests a stage's files hold at `tip`: walking back from `tip`,
/// the first commit none of whose parents holds the same (a parent with the same files under
/// `paths`, or whose `fingerprint_at` is `fingerprint`, carried them there, and the walk goes
/// on from it, the first parent first). A root commit that holds them pinned them. `None`
/// when the walk goes past [`PIN_SEARCH_DEPTH`] commits.
pub(crate) fn pinning_commit(
    mirror: &Mirror,
    tip: git2::Oid,
    paths: &[String],
    fingerprint: &str,
    mut fingerprint_at: impl FnMut(git2::Oid) -> Result<String, GitError>,
) -> Result<Option<git2::Oid>, GitError> {
    let mut at = tip;
    for _ in 0..PIN_SEARCH_DEPTH {
        let here = mirror.path_ids(at, paths)?;
        let mut carried_from = None;
        for parent in mirror.parents(at)? {
            if mirror.path_ids(parent, paths)? == here || fingerprint_at(parent)? == fingerprint {
                carried_from = Some(parent);
                break;
            }
        }
        match carried_from {
            Some(parent) => at = parent,
            None => return Ok(Some(at)),
        }
    }
    Ok(None)
}

/// The refusal when the pinning commit is further back than the walk goes.
pub(crate) fn too_far(stage: &str) -> String {
    format!(
        "stage {stage}: the commit that pinned its digests is more than {PIN_SEARCH_DEPTH} \
         commits back and cannot be checked against promotion.require_signed_by; not promoted"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_stage_the_commit_the_keys_and_the_signer() {
        let text = refusal_text(
            "staging",
            "0123456789abcdef0123456789abcdef01234567",
            "it is signed by SSH key SHA256:abc",
            &["keys/release.pub", "keys/ci.asc"],
        );
        assert!(text.starts_with("stage staging: commit 0123456789abcdef0123456789abcdef01234567"));
        assert!(text.contains("(keys/release.pub, keys/ci.asc)"), "{text}");
        assert!(
            text.contains("it is signed by SSH key SHA256:abc"),
            "{text}"
        );
    }
}
