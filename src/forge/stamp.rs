//! tagpin's own build statuses on a forge that records no status author (Bitbucket Cloud and
//! Data Center): a stamp signed with the token, and the forge's clock it is said on.
//!
//! The signer keeps, for this process, the newest status it set or believed on each commit and
//! key ([`StatusSigner::remember`]): a signed status said earlier there is a replay. That
//! memory lives in the adapter (one per configured repository) for as long as the process.

use super::engine::ForgeError;

/// What stands in for the author of a status on a forge that records none (Bitbucket Cloud
/// and Data Center): tagpin signs what its own statuses say, and when it said them, with an
/// HMAC-SHA256 keyed by its token, and only a status carrying that signature is tagpin's.
/// Someone else can replace the status but not sign a new one; a new token makes tagpin's
/// older statuses read as not its own (set again, a soak starting over: never earlier).
///
/// A signature alone does not tell a replay from the latest word: a status tagpin set once,
/// saved and posted again later by anyone who may post statuses, still carries a good
/// signature. So the signature also covers *when* tagpin said it, on the forge's own clock
/// (the `Date` of the forge's latest answer, [`super::engine::ForgeClock`]), and a signed status
/// is believed only while the time the forge recorded for it is within [`SAID_EARLY`] before
/// and [`SAID_LATE`] after that ([`believable`]): posted again later, it gets a later time and
/// reads as someone else's (the soak starts again, never earlier). Within one process, a
/// signed status said before the newest one this process set or believed of the same commit
/// and key is a replay too ([`StatusSigner::owns`]).
pub(super) struct StatusSigner {
    key: hmac::Hmac<sha2::Sha256>,
    /// `(commit, key)` -> when the newest status this process set or believed there was said.
    newest: std::sync::Mutex<std::collections::HashMap<(String, String), i64>>,
}

/// How much earlier than the signed time the forge may record a status of tagpin's: the
/// `Date` header counts whole seconds, and a forge's servers may disagree by a few.
pub const SAID_EARLY: i64 = 10;
/// How much later than the signed time the forge may record a status of tagpin's: the time
/// from the answer whose `Date` was read to the write arriving, within one call's deadline.
/// A status recorded later than this was posted again by someone (or took longer than any
/// call may): it is not believed, and the soak it carried starts again.
pub const SAID_LATE: i64 = 120;
/// `(commit, key)` entries kept of what this process set or believed; cleared when full.
const MAX_NEWEST: usize = 512;

/// Whether a status tagpin signed as said at `said` (the forge's clock, Unix seconds) and
/// which the forge recorded at `recorded` was posted when tagpin said it, not later.
pub(super) fn believable(said: i64, recorded: i64) -> bool {
    let lag = recorded.saturating_sub(said);
    (-SAID_EARLY..=SAID_LATE).contains(&lag)
}

impl StatusSigner {
    /// The bytes of the signature kept: 128 bits, as 32 hex digits.
    const BYTES: usize = 16;

    pub(super) fn new(forge: &'static str, token: &str) -> Result<StatusSigner, ForgeError> {
        use hmac::Mac as _;
        let key = hmac::Hmac::new_from_slice(token.as_bytes()).map_err(|_| ForgeError::Setup {
            forge,
            detail: "the token cannot key a signature".into(),
        })?;
        Ok(StatusSigner {
            key,
            newest: std::sync::Mutex::default(),
        })
    }

    /// The MAC over `parts` (what the status says) and `at` (when), each followed by a NUL.
    fn mac(&self, parts: &[&str], at: i64) -> hmac::Hmac<sha2::Sha256> {
        use hmac::Mac as _;
        let mut mac = self.key.clone();
        let at = at.to_string();
        let all = std::iter::once("tagpin build status v2")
            .chain(parts.iter().copied())
            .chain(std::iter::once(at.as_str()));
        for part in all {
            mac.update(part.as_bytes());
            mac.update(&[0]);
        }
        mac
    }

    /// The stamp of a status saying `parts`, said at `at` (the forge's clock):
    /// `<at>-<32 hex digits>`. Once the forge took the status, [`StatusSigner::remember`] it.
    pub(super) fn stamp(&self, parts: &[&str], at: i64) -> String {
        use hmac::Mac as _;
        let bytes = self.mac(parts, at).finalize().into_bytes();
        let hex: String = bytes[..Self::BYTES]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{at}-{hex}")
    }

    /// When the status `given` stamps was said, if `given` is tagpin's stamp of a status
    /// saying `parts` (compared in constant time).
    pub(super) fn said_at(&self, parts: &[&str], given: &str) -> Option<i64> {
        use hmac::Mac as _;
        let (at, hex) = given.split_once('-')?;
        let at: i64 = at.parse().ok()?;
        let bytes: Vec<u8> = (hex.len() == 2 * Self::BYTES && hex.is_ascii())
            .then(|| {
                (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
                    .collect::<Option<Vec<u8>>>()
            })
            .flatten()?;
        self.mac(parts, at)
            .verify_truncated_left(&bytes)
            .is_ok()
            .then_some(at)
    }

    /// Whether a status on commit and key `which`, saying `parts` with stamp `given`, which
    /// the forge recorded at `recorded`, is tagpin's own word and not a replay: the stamp is
    /// tagpin's, the forge recorded it when it was said ([`believable`]), and it was said no
    /// earlier than the newest this process set or believed there.
    pub(super) fn owns(
        &self,
        which: (&str, &str),
        parts: &[&str],
        given: &str,
        recorded: Option<i64>,
    ) -> bool {
        let Some(said) = self.said_at(parts, given) else {
            return false;
        };
        let fresh = recorded.is_some_and(|recorded| believable(said, recorded));
        let key = (which.0.to_string(), which.1.to_string());
        let newest = crate::mutex::lock(&self.newest).get(&key).copied();
        if !fresh || newest.is_some_and(|newest| said < newest) {
            return false;
        }
        self.remember(which, said);
        true
    }

    /// Remembers a status on commit and key `which` said at `at` as set (or believed) by this
    /// process: one said earlier there is a replay from now on.
    pub(super) fn remember(&self, which: (&str, &str), at: i64) {
        let mut newest = crate::mutex::lock(&self.newest);
        if newest.len() >= MAX_NEWEST {
            newest.clear();
        }
        let entry = newest
            .entry((which.0.to_string(), which.1.to_string()))
            .or_insert(at);
        *entry = (*entry).max(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_status_stamp_binds_what_was_said_to_when() {
        let signer = StatusSigner::new("Bitbucket", "token-a").unwrap();
        let said = ["acme/gitops", "abc", "tagpin/converged", "SUCCESSFUL", "ok"];
        let stamp = signer.stamp(&said, 1_000);
        assert!(stamp.starts_with("1000-"), "{stamp}");
        assert_eq!(signer.said_at(&said, &stamp), Some(1_000));
        // Another time claimed with the same signature, other words, another token: no.
        let moved = stamp.replacen("1000-", "1500-", 1);
        assert_eq!(signer.said_at(&said, &moved), None);
        let other = ["acme/gitops", "abc", "tagpin/converged", "SUCCESSFUL", "ko"];
        assert_eq!(signer.said_at(&other, &stamp), None);
        let rotated = StatusSigner::new("Bitbucket", "token-b").unwrap();
        assert_eq!(rotated.said_at(&said, &stamp), None);
        for junk in ["", "1000", "1000-zz", "x-00", &stamp[..stamp.len() - 2]] {
            assert_eq!(signer.said_at(&said, junk), None, "{junk}");
        }
    }

    #[test]
    fn a_signed_status_is_believed_only_as_recorded_when_it_was_said() {
        assert!(believable(1_000, 1_000));
        assert!(believable(1_000, 1_000 - SAID_EARLY));
        assert!(believable(1_000, 1_000 + SAID_LATE));
        assert!(!believable(1_000, 1_000 - SAID_EARLY - 1));
        assert!(
            !believable(1_000, 1_000 + SAID_LATE + 1),
            "posted again later"
        );
        assert!(!believable(i64::MIN, i64::MAX));
        let signer = StatusSigner::new("Bitbucket", "token-a").unwrap();
        let said = ["acme/gitops", "abc", "k", "SUCCESSFUL", "ok"];
        let stamp = signer.stamp(&said, 1_000);
        assert!(signer.owns(("abc", "k"), &said, &stamp, Some(1_002)));
        assert!(!signer.owns(("abc", "k"), &said, &stamp, Some(5_000)));
        assert!(!signer.owns(("abc", "k"), &said, &stamp, None));
    }
}
