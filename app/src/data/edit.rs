//! One edit as its owner follows it: the lineage of versions (which one
//! they have, each repair's instruction and what the comparison found),
//! whether a repair can be asked for and at what price, and the timeline
//! in plain words. Reviewers and admins also get the detailed timeline.

use serde::{Deserialize, Serialize};

/// One version of an edit: the original or a repair.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct VersionView {
    pub id: String,
    /// "Original", "Repair 1", "Repair 2".
    pub label: String,
    pub instruction: Option<String>,
    pub status: tollgate::model::JobStatus,
    /// improved, unchanged or worse; `None` for the original or before it ran.
    pub outcome: Option<String>,
    /// The version's own output (a candidate that was not kept included).
    pub output_url: Option<String>,
    /// The version the person has now.
    pub delivered: bool,
    /// The one this page shows.
    pub current: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LineageView {
    pub versions: Vec<VersionView>,
    pub repairs_left: u32,
    /// Why no repair may be asked for, in words; `None` when one may.
    pub closed: Option<String>,
    /// A repair costs what the original did.
    pub repair_credits: i64,
    pub balance: i64,
    /// The repair form's idempotency key, made when the page was rendered.
    pub repair_key: String,
    /// The version repairs are made on.
    pub delivered_id: String,
}

/// One line of the owner's timeline.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StoryRow {
    pub what: String,
    pub when: String,
    /// ok, warn, bad or plain: how the line is marked.
    pub tone: String,
}

#[cfg(feature = "ssr")]
pub(super) mod ssr {
    use super::*;
    use tollgate::model::{JobStatus, LineageState, REPAIRS_MAX};
    use tollgate::store::{Job, JobEvent, User};
    use tollgate::Tollgate;

    pub async fn lineage_view(
        t: &Tollgate,
        viewer: &User,
        job: &Job,
    ) -> Result<Option<LineageView>, tollgate::Error> {
        let Some(state) = t.lineage_state(job).await? else {
            return Ok(None);
        };
        let versions = t.lineage_versions(&state).await?;
        let balance = t.user(viewer.id).await?.balance.get();
        let closed = closed_reason(&state, job, viewer);
        let mut n = 0;
        let versions = versions
            .iter()
            .map(|v| {
                let label = if v.is_repair() {
                    n += 1;
                    format!("Repair {n}")
                } else {
                    "Original".to_string()
                };
                VersionView {
                    id: v.id.to_string(),
                    label,
                    instruction: v.instruction.clone(),
                    status: v.status,
                    outcome: v
                        .progress
                        .compare
                        .as_ref()
                        .and_then(|c| c.outcome)
                        .map(|o| o.as_str().to_string()),
                    output_url: (v.status == JobStatus::Succeeded
                        && v.output_content_type.is_some())
                    .then(|| format!("/v1/jobs/{}/output", v.id)),
                    delivered: v.id == state.delivered,
                    current: v.id == job.id,
                }
            })
            .collect();
        Ok(Some(LineageView {
            versions,
            repairs_left: state.repairs_left(),
            closed,
            repair_credits: job.credits.get(),
            balance,
            repair_key: uuid::Uuid::new_v4().to_string(),
            delivered_id: state.delivered.to_string(),
        }))
    }

    fn closed_reason(state: &LineageState, job: &Job, viewer: &User) -> Option<String> {
        if job.user_id != viewer.id {
            return Some("Only the person who ordered this edit can ask for a repair.".into());
        }
        if state.stopped {
            return Some(
                "A repair did not improve on the version you had, so we kept yours and this edit takes no more repairs. Order a new edit to try something else."
                    .into(),
            );
        }
        if state.repairs_used >= REPAIRS_MAX {
            return Some(format!(
                "This edit has had its {REPAIRS_MAX} repairs. Order a new edit to try something else."
            ));
        }
        if job.status != JobStatus::Succeeded {
            return Some("A repair can be asked for once this edit has finished well.".into());
        }
        None
    }

    /// The timeline in a person's words: what happened to their order,
    /// not how the machinery did it.
    pub fn story(events: &[JobEvent]) -> Vec<StoryRow> {
        let mut out = Vec::new();
        let mut sent = 0;
        // The terminal write carries the last step's record with it, so its
        // event is stored first; a person reads the ending last.
        let ending = |k: &str| {
            matches!(
                k,
                "succeeded" | "failed" | "cancelled" | "refunded" | "cancelled_while_parked"
            )
        };
        let ordered = events
            .iter()
            .filter(|e| !ending(&e.kind))
            .chain(events.iter().filter(|e| ending(&e.kind)));
        for e in ordered {
            let d = &e.detail;
            let s = |x: &str| d[x].as_str().unwrap_or_default().to_string();
            let (what, tone) = match e.kind.as_str() {
                "created" => (
                    match d["credits"].as_i64() {
                        Some(c) => format!("Ordered; {c} credits charged."),
                        None => "Ordered.".to_string(),
                    },
                    "plain",
                ),
                "step" => match step_words(d) {
                    Some(words) => words,
                    None => continue,
                },
                "attempt" if d["purpose"].as_str().unwrap_or("generate") == "generate" => {
                    sent += 1;
                    if sent == 1 {
                        ("Sent to the model.".into(), "plain")
                    } else {
                        ("Sent to the model again.".into(), "plain")
                    }
                }
                "succeeded" => ("Finished.".into(), "ok"),
                "failed" => (failure_words(&s("code")), "bad"),
                "cancelled" => ("Cancelled.".into(), "plain"),
                "refunded" => ("Refunded: your credits are back.".into(), "ok"),
                "parked" => (
                    "Waiting for a person to check it; nothing more is spent meanwhile.".into(),
                    "warn",
                ),
                "decision" => (decision_words(&s("action")).into(), "plain"),
                "cancelled_while_parked" => (
                    "Cancelled while it waited for a reviewer; a reviewer still settles what the provider may have charged.".into(),
                    "plain",
                ),
                _ => continue,
            };
            out.push(StoryRow {
                what,
                when: e.created_at.format("%H:%M:%S").to_string(),
                tone: tone.into(),
            });
        }
        out
    }

    /// A workflow step in a person's words, or none for steps they need
    /// not read about.
    fn step_words(d: &serde_json::Value) -> Option<(String, &'static str)> {
        let s = |x: &str| d[x].as_str().unwrap_or_default().to_string();
        Some(match s("step").as_str() {
            "readiness" => (
                match d["observation"].as_str() {
                    Some(o) if !o.is_empty() => format!("Checked the photo: {o}"),
                    _ => "Checked the photo: ready to edit.".into(),
                },
                "ok",
            ),
            "generate" => ("The model finished the edit.".into(), "ok"),
            "review" => match s("verdict").as_str() {
                "passed" => ("Checked the result: it looks right.".into(), "ok"),
                "issues" => (
                    format!("Checked the result and found something: {}", s("notes")),
                    "warn",
                ),
                _ => (
                    "The result could not be checked (not verified).".into(),
                    "warn",
                ),
            },
            "compare" => match s("outcome").as_str() {
                "improved" => (
                    "Compared with the version you had: better, so this one is yours now.".into(),
                    "ok",
                ),
                "unchanged" => (
                    "Compared with the version you had: no better, so we kept yours.".into(),
                    "warn",
                ),
                "worse" => (
                    "Compared with the version you had: worse, so we kept yours.".into(),
                    "warn",
                ),
                _ => (
                    "The comparison could not run, so we kept the version you had.".into(),
                    "warn",
                ),
            },
            _ => return None,
        })
    }

    /// Why a job stopped, from its error code.
    fn failure_words(code: &str) -> String {
        match code {
            "NOT_READY" => {
                "Stopped before anything was paid for: the photo needs an answer from you first."
                    .to_string()
            }
            "SPENDING_PAUSED" => {
                "Stopped: spending is paused today, so nothing was sent.".to_string()
            }
            "" => "Stopped: it did not work.".to_string(),
            code => format!(
                "Stopped: it did not work ({}).",
                code.to_lowercase().replace('_', " ")
            ),
        }
    }

    /// What a reviewer's decision means for the person.
    fn decision_words(action: &str) -> &'static str {
        match action {
            "reconcile" => "A reviewer found the provider's job for this edit.",
            "resume_poll" => "A reviewer asked us to check on it with the provider again.",
            "retry_delivery" => "A reviewer asked us to fetch the finished result again.",
            "accept_failure" => "A reviewer closed it as failed.",
            "new_attempt" => "A reviewer ordered a new attempt in its place.",
            _ => "A reviewer decided what happens next.",
        }
    }
}
