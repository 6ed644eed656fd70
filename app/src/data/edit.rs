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
    /// The person may make it theirs again: it was delivered once (the
    /// first edit, or a repair found better), it is not theirs now, they
    /// ordered it, and no repair is under way.
    pub choosable: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LineageView {
    pub versions: Vec<VersionView>,
    pub repairs_left: u32,
    /// Why no repair may be asked for, in words; `None` when one may.
    pub closed: Option<String>,
    /// What the next repair costs the person: what the first edit did, or
    /// nothing (once) when the version's review found issues.
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
    use tollgate::model::{
        CompareOutcome, Happening, JobStatus, LineageState, Purpose, ReviewAction, StepDone,
        Verdict, REPAIRS_MAX,
    };
    use tollgate::store::{Job, JobEvent, User};
    use tollgate::Tollgate;

    pub async fn lineage_view(
        t: &Tollgate,
        viewer: &User,
        job: &Job,
        state: Option<LineageState>,
    ) -> Result<Option<LineageView>, tollgate::Error> {
        let Some(state) = state else {
            return Ok(None);
        };
        let versions = t.lineage_versions(&state).await?;
        let repair_credits = if t.next_repair_is_free(&state).await? {
            0
        } else {
            job.credits.get()
        };
        let balance = t.user(viewer.id).await?.balance.get();
        let closed = closed_reason(&state, job, viewer);
        // A repair under way is compared with the version it was made on.
        let settled = versions
            .iter()
            .all(|v| v.status.is_terminal() || !v.is_repair());
        let owner = job.user_id == viewer.id;
        let mut n = 0;
        let versions = versions
            .iter()
            .map(|v| {
                let label = if v.is_repair() {
                    n += 1;
                    format!("Repair {n}")
                } else {
                    "First edit".to_string()
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
                    choosable: owner && settled && v.was_delivered() && v.id != state.delivered,
                }
            })
            .collect();
        Ok(Some(LineageView {
            versions,
            repairs_left: state.repairs_left(),
            closed,
            repair_credits,
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
        let mut sent = 0;
        // The terminal write carries the last step's record with it, so its
        // entry is stored first; a person reads the ending last.
        let ordered = events
            .iter()
            .filter(|e| !e.happening.is_ending())
            .chain(events.iter().filter(|e| e.happening.is_ending()));
        ordered
            .filter_map(|e| {
                let (what, tone) = story_words(&e.happening, &mut sent)?;
                Some(StoryRow {
                    what,
                    when: e.created_at.format("%H:%M:%S").to_string(),
                    tone: tone.into(),
                })
            })
            .collect()
    }

    /// One entry in a person's words, or none for the machinery's entries.
    /// `sent` counts the paid sends so far.
    fn story_words(h: &Happening, sent: &mut u32) -> Option<(String, &'static str)> {
        Some(match h {
            Happening::Created { credits, .. } => (format!("Ordered; {credits} credits charged."), "plain"),
            Happening::Step(done) => step_words(done),
            Happening::Attempt { purpose: Purpose::Generate, .. } => {
                *sent += 1;
                let again = if *sent == 1 { "" } else { " again" };
                (format!("Sent to the model{again}."), "plain")
            }
            Happening::Succeeded {} => ("Finished.".into(), "ok"),
            Happening::Failed { code } => (
                code.map_or("Stopped: it did not work.", |c| c.words()).into(),
                "bad",
            ),
            Happening::Cancelled { .. } => ("Cancelled.".into(), "plain"),
            Happening::Refunded {} => ("Refunded: your credits are back.".into(), "ok"),
            Happening::Waived { .. } => (
                "On us: our check found issues with the version before, so this repair's credits came straight back.".into(),
                "ok",
            ),
            Happening::Parked { .. } => (
                "Waiting for a person to check it; nothing more is spent meanwhile.".into(),
                "warn",
            ),
            Happening::Decision(d) => (decision_words(d.action).into(), "plain"),
            Happening::CancelledWhileParked { .. } => (
                "Cancelled while it waited for a reviewer; a reviewer still settles what the provider may have charged.".into(),
                "plain",
            ),
            _ => return None,
        })
    }

    /// A workflow step in a person's words.
    fn step_words(done: &StepDone) -> (String, &'static str) {
        match done {
            StepDone::Readiness(r) => (
                match r.observation.as_deref() {
                    Some(o) if !o.is_empty() => format!("Checked the photo: {o}"),
                    _ => "Checked the photo: ready to edit.".into(),
                },
                "ok",
            ),
            StepDone::Generate(_) => ("The model finished the edit.".into(), "ok"),
            StepDone::Review(r) => match r.verdict {
                Verdict::Passed => ("Checked the result: it looks right.".into(), "ok"),
                Verdict::Issues => (
                    format!("Checked the result and found something: {}", r.notes),
                    "warn",
                ),
                Verdict::NotVerified => (
                    "The result could not be checked (not verified).".into(),
                    "warn",
                ),
            },
            StepDone::Compare(c) => match c.outcome {
                Some(CompareOutcome::Improved) => (
                    "Compared with the version you had: better, so this one is yours now.".into(),
                    "ok",
                ),
                Some(CompareOutcome::Unchanged) => (
                    "Compared with the version you had: no better, so we kept yours.".into(),
                    "warn",
                ),
                Some(CompareOutcome::Worse) => (
                    "Compared with the version you had: worse, so we kept yours.".into(),
                    "warn",
                ),
                None => (
                    "The comparison could not run, so we kept the version you had.".into(),
                    "warn",
                ),
            },
        }
    }

    /// What a reviewer's decision means for the person.
    fn decision_words(action: ReviewAction) -> &'static str {
        match action {
            ReviewAction::Reconcile => "A reviewer found the provider's job for this edit.",
            ReviewAction::ResumePoll => {
                "A reviewer asked us to check on it with the provider again."
            }
            ReviewAction::RetryDelivery => {
                "A reviewer asked us to fetch the finished result again."
            }
            ReviewAction::AcceptFailure => "A reviewer closed it as failed.",
            ReviewAction::NewAttempt => "A reviewer ordered a new attempt in its place.",
        }
    }
}
