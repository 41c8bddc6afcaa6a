//! What a tagpin commit says: the filled template, then one line per field moved.
//!
//! Commit mode writes this without a forge, so it lives beside the plan block rather than
//! with the forge; the pull request's title is filled from the same template words.

use super::PlanBlock;

/// Fills `{count}`, `{branch}` and `{images}` in a title or commit message template.
pub(crate) fn fill_template(template: &str, block: &PlanBlock) -> String {
    let mut images: Vec<&str> = block.pins.iter().map(|p| p.image.as_str()).collect();
    images.sort();
    images.dedup();
    template
        .replace("{count}", &images.len().to_string())
        .replace("{branch}", &block.target)
        .replace("{images}", &images.join(", "))
}

/// The commit message: the filled template, then one line per image moved.
pub(crate) fn commit_message(template: &str, block: &PlanBlock) -> String {
    let mut message = fill_template(template, block);
    message.push_str("\n\n");
    message.push_str(&pin_lines(block));
    message
}

/// One line per field moved: `image (file workload/container): old -> new`, with the tag on
/// both sides when it moved (`1.4.2@sha256:a -> 1.4.3@sha256:b`).
pub(crate) fn pin_lines(block: &PlanBlock) -> String {
    let mut lines = String::new();
    for pin in &block.pins {
        let old_digest = pin.old_digest.as_ref().map(ToString::to_string);
        let (old, new) = match (&pin.old_tag, &pin.new_tag, old_digest) {
            (Some(old_tag), Some(new_tag), old_digest) => (
                old_digest.map_or(format!("{old_tag} (unpinned)"), |d| {
                    format!("{old_tag}@{d}")
                }),
                format!("{new_tag}@{}", pin.new_digest),
            ),
            (_, _, old_digest) => (
                old_digest.unwrap_or_else(|| "unpinned".to_string()),
                pin.new_digest.to_string(),
            ),
        };
        lines.push_str(&format!(
            "{} ({} {}/{}): {old} -> {new}\n",
            pin.image, pin.file, pin.workload, pin.container,
        ));
    }
    lines
}

/// How many fields a commit message written by [`commit_message`] says were moved: its
/// [`pin_lines`].
pub(crate) fn count_pin_lines(message: &str) -> usize {
    message
        .lines()
        .filter(|line| {
            line.split_once("): ")
                .and_then(|(_, change)| change.split_once(" -> "))
                .is_some_and(|(_, new)| new.contains("sha256:"))
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::super::body::tests::block;
    use super::*;

    #[test]
    fn templates_fill_count_branch_and_images() {
        assert_eq!(
            fill_template("Pin {count} on {branch}: {images}", &block()),
            "Pin 1 on main: ghcr.io/acme/web:1.0"
        );
        let message = commit_message("Pin {count}", &block());
        assert!(message.starts_with("Pin 1\n\nghcr.io/acme/web:1.0 (apps/web.yaml shop/Deployment/web/app): unpinned -> sha256:1111"), "{message}");
    }

    #[test]
    fn the_fields_a_commit_moved_are_counted_back_from_its_message() {
        let mut two = block();
        two.pins.push(two.pins[0].clone());
        two.pins[1].old_tag = Some("0.9".into());
        two.pins[1].new_tag = Some("1.0".into());
        let message = commit_message("Pin {count} -> now", &two);
        assert_eq!(count_pin_lines(&message), 2, "{message}");
        assert_eq!(count_pin_lines("Bump web (a person): 1 -> 2\n"), 0);
    }
}
