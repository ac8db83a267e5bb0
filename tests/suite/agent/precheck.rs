//! A soul's `[precheck]`: local probes before the first model call; a quiet run costs
//! nothing, findings reach the model in its first request.

use familiar_protocol::task::TaskStatus;

use crate::common::harness::*;

#[tokio::test]
async fn a_quiet_precheck_skips_the_model_and_says_nothing_to_report() {
    let h = Harness::new(vec![text_reply("should not be asked")]).await;
    let rt = h.runtime(builtin_plus(Vec::new()));
    let soul = h.soul(
        "tools = [\"read_file\"]\n[precheck]\nfailed_units = false\njournal_errors = false\n\
         disk_percent = 100\n",
    );
    let (outcome, events) = h.run(rt, h.spec(soul, "weekly check-up", None)).await;
    assert_eq!(outcome.status, TaskStatus::Skipped, "{}", outcome.result);
    assert_eq!(outcome.result, "nothing to report: every disk below 100%");
    assert_eq!(outcome.usage.total(), 0);
    assert!(h.server.requests().is_empty(), "no model call");
    assert_eq!(kinds(&events).last(), Some(&"task_finished"));
    // The time of this pre-check is kept for the next one's journal look-back.
    assert!(h.store.data_dir().join("precheck/test").exists());
    // Regression: precheck/ was made 0755; the data dir and all in it are 0700.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(h.store.data_dir().join("precheck"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o700);
}

#[tokio::test]
async fn precheck_findings_reach_the_model_in_its_first_request() {
    let h = Harness::new(vec![text_reply("the root disk is filling up")]).await;
    let rt = h.runtime(builtin_plus(Vec::new()));
    // Every real disk is more than 1% used.
    let soul = h.soul(
        "tools = [\"read_file\"]\n[precheck]\nfailed_units = false\njournal_errors = false\n\
         disk_percent = 1\n",
    );
    let (outcome, _) = h.run(rt, h.spec(soul, "weekly check-up", None)).await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{}", outcome.result);
    let sent = h.server.requests()[0].body["messages"].to_string();
    assert!(
        sent.contains("A pre-check found, before you started"),
        "{sent}"
    );
    assert!(sent.contains("% full ("), "{sent}");
}
