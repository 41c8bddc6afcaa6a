//! A minimum age in promotions (`images.minimum_age`, issue #41), in the promotion world of
//! `promote.rs`: a promotion carries only digests old enough, holds the others in production
//! saying when they will be, and carries them once the clock has moved past that.

use super::*;

#[tokio::test]
async fn a_promotion_carries_only_digests_old_enough_and_the_others_once_they_are() {
    let w = World::new(Layout::Plain, "0s").await;
    w.staging_pinned_and_converged().await;
    // From now on web's digests must be an hour old. Its registry gives no build time, so the
    // hour counts from tagpin's first sighting: this promotion's.
    let mut config = std::fs::read_to_string(w.config()).unwrap();
    config.push_str(&format!(
        "images:\n  minimum_age:\n  - {{match: '{}/acme/web', age: 1h}}\n",
        w.host
    ));
    std::fs::write(w.config(), config).unwrap();

    let (code, report, out) = w.promote_json().await;

    assert_eq!(code, Some(0), "{}", text(&out));
    let carried: Vec<&str> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["image"].as_str().unwrap())
        .collect();
    assert_eq!(
        carried,
        [format!("{}/acme/api:{API_NEW}", w.host)],
        "{report:#}"
    );
    let held = report["held"].as_array().unwrap();
    assert_eq!(held.len(), 1, "{report:#}");
    assert_eq!(held[0]["would_be"], w.new.web.as_str());
    assert_eq!(held[0]["age"]["from"], "first_seen");
    assert!(
        held[0]["reason"]
            .as_str()
            .unwrap()
            .contains("younger than the minimum age 1h: eligible at"),
        "{report:#}"
    );
    let web = "envs/production/web.yaml";
    assert_eq!(w.repo.read(PR_BRANCH, web).unwrap(), w.initial(web));
    assert!(w
        .repo
        .read(PR_BRANCH, "envs/production/api.yaml")
        .unwrap()
        .contains(&w.new.api));

    // An hour later (tagpin's clock and the forge's), web is carried too.
    w.github.advance_clock(Duration::from_secs(3601));
    let later = w.promote_at_forge_time().await;

    assert!(later["held"].as_array().unwrap().is_empty(), "{later:#}");
    let web_change = later["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["new_digest"] == w.new.web.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{later:#}"));
    assert!(web_change["age"]["seconds"].as_i64().unwrap() >= 3600);
    assert!(w.repo.read(PR_BRANCH, web).unwrap().contains(&w.new.web));
}
