//! The detailed timeline reviewers and admins read, in words: each entry
//! says what happened ("Attempt 1 failed (timeout); what it cost is
//! unknown"), and what was recorded, exactly, stays behind a toggle on the
//! page (issue 33, 7). The job owner's shorter story is `edit::story`.

use serde::{Deserialize, Serialize};

/// One entry of the detailed timeline.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EventRow {
    /// What happened, in words.
    pub what: String,
    pub when: String,
    /// As recorded: the entry's kind and its detail, for the toggle.
    pub kind: String,
    pub detail: String,
}

#[cfg(feature = "ssr")]
impl EventRow {
    pub fn of(e: &tollgate::store::JobEvent) -> EventRow {
        let (kind, detail) = e.happening.to_stored();
        EventRow {
            what: ssr::staff_words(&e.happening),
            when: e.created_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
            kind,
            detail: recorded(&detail),
        }
    }
}

/// An entry's detail as recorded: "credits 3 · estimated_usd 0.060000".
#[cfg(feature = "ssr")]
fn recorded(detail: &serde_json::Value) -> String {
    match detail.as_object() {
        Some(o) => o
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) => format!("{k} {s}"),
                None => format!("{k} {v}"),
            })
            .collect::<Vec<_>>()
            .join(" · "),
        None => detail.to_string(),
    }
}

#[cfg(feature = "ssr")]
mod ssr {
    use tollgate::model::{
        AttemptState, CompareOutcome, FailureCode, Happening, Purpose, StepDone, Usd, Verdict,
    };

    /// What an entry means, for the studio's staff.
    pub fn staff_words(h: &Happening) -> String {
        match h {
            Happening::Attempt { .. }
            | Happening::Submitted { .. }
            | Happening::AttemptEnded { .. }
            | Happening::Settled { .. } => attempt_words(h),
            Happening::Step(done) => step_words(done),
            _ => job_words(h),
        }
    }

    /// The job's own life: ordered, claimed, parked, decided, ended.
    fn job_words(h: &Happening) -> String {
        match h {
            Happening::Created {
                credits,
                estimated_usd,
            } => {
                let estimate = estimated_usd
                    .map(|u| format!("; the provider estimate is ${u}"))
                    .unwrap_or_default();
                format!("Ordered: {credits} credits charged{estimate}.")
            }
            Happening::Claimed { worker, token } => format!(
                "Picked up by {} (claim {token}).",
                worker.as_deref().unwrap_or("a worker")
            ),
            Happening::Released { .. } => "Given back to the queue.".into(),
            Happening::LeaseLost { token } => {
                format!("Claim {token} was lost: nothing that run did after counts.")
            }
            Happening::Succeeded {} => "Finished and delivered.".into(),
            Happening::Failed { code } => format!("Failed{}.", code_words(code)),
            Happening::Cancelled { code } => format!("Cancelled{}.", code_words(code)),
            Happening::Refunded {} => "The owner's credits were refunded.".into(),
            Happening::Waived { credits } => format!(
                "A free repair: its {credits} credits were given back as it was ordered (the version before was flagged by its review)."
            ),
            _ => review_words(h),
        }
    }

    /// Parked work and what reviewers did with it.
    fn review_words(h: &Happening) -> String {
        match h {
            Happening::Parked { stage, reason, .. } => format!(
                "Parked for a reviewer ({}){}",
                stage.label().to_lowercase(),
                reason.as_deref().map(|r| format!(": {r}")).unwrap_or_else(|| ".".into())
            ),
            Happening::RecoveryFailed { stage, .. } => format!(
                "The approved recovery did not work; parked again ({}).",
                stage.label().to_lowercase()
            ),
            Happening::RecoveryClaimed { action, .. } => format!(
                "A worker began what the reviewer approved: {}.",
                action.label().to_lowercase()
            ),
            Happening::ReviewClosed { outcome } => format!(
                "The parked record closed; the job is {}.",
                outcome.label().to_lowercase()
            ),
            Happening::CancelledWhileParked { .. } => {
                "The owner cancelled while it was parked: refunded, and the record stays open until a reviewer settles what the provider may have charged.".into()
            }
            Happening::Decision(d) => format!(
                "{} decided: {}{}",
                d.reviewer.as_deref().unwrap_or("A reviewer"),
                d.action.label().to_lowercase(),
                d.evidence
                    .as_deref()
                    .filter(|e| !e.is_empty())
                    .map(|e| format!(" (“{e}”)"))
                    .unwrap_or_else(|| ".".into())
            ),
            Happening::Note { text, by } => format!("{by} noted: {text}"),
            Happening::NewAttempt { job, .. } => {
                format!("A reviewer ordered a new attempt in its place ({job}).")
            }
            Happening::Replaces { job, .. } => format!("Ordered in place of {job}."),
            Happening::Unknown { kind, .. } => format!("Recorded: {}.", kind.replace('_', " ")),
            _ => String::new(),
        }
    }

    fn code_words(code: &Option<FailureCode>) -> String {
        code.map(|c| format!(" ({})", c.as_str().to_lowercase().replace('_', " ")))
            .unwrap_or_default()
    }

    /// A provider attempt: begun, accepted, ended, settled.
    fn attempt_words(h: &Happening) -> String {
        match h {
            Happening::Attempt {
                attempt,
                purpose,
                model,
                hold_usd,
                ..
            } => {
                let hold = hold_usd
                    .map(|u| format!("; ${u} held against the day's budget"))
                    .unwrap_or_default();
                format!(
                    "Attempt {attempt} began: {} with {model}{hold}.",
                    purpose_words(*purpose)
                )
            }
            Happening::Submitted {
                attempt,
                provider_job_id,
            } => format!(
                "The provider accepted attempt {attempt}{}.",
                provider_job_id
                    .as_deref()
                    .map(|id| format!(" as {id}"))
                    .unwrap_or_default()
            ),
            Happening::AttemptEnded {
                attempt,
                state,
                error_class,
                usd,
                priced,
            } => {
                let how = match (state, error_class) {
                    (AttemptState::Failed, Some(c)) => format!("failed ({})", c.words()),
                    (s, _) => s.as_str().to_string(),
                };
                format!("Attempt {attempt} {how}; {}.", cost_words(*usd, *priced))
            }
            Happening::Settled {
                attempt,
                usd,
                priced,
            } => {
                let how = if *priced {
                    "at its price"
                } else {
                    "at the estimate, since nobody could price it"
                };
                format!("Attempt {attempt}'s hold became spend: ${usd}, {how}.")
            }
            _ => String::new(),
        }
    }

    fn purpose_words(p: Purpose) -> &'static str {
        match p {
            Purpose::Generate => "the paid call",
            Purpose::Readiness => "the look before paying",
            Purpose::Review => "the review of the result",
            Purpose::Compare => "the comparison with the version before",
        }
    }

    /// What a call cost: a number only when someone priced it.
    fn cost_words(usd: Option<Usd>, priced: bool) -> String {
        match (usd, priced) {
            (Some(u), true) => format!("it cost ${u}"),
            (Some(u), false) => format!("what it cost is unknown (${u} is the estimate)"),
            (None, _) => "what it cost is unknown".into(),
        }
    }

    fn step_words(done: &StepDone) -> String {
        match done {
            StepDone::Readiness(r) => format!(
                "The look before paying found the target ({}% of the picture){}",
                (r.region_fraction * 100.0).round(),
                r.observation
                    .as_deref()
                    .map(|o| format!(": {o}"))
                    .unwrap_or_else(|| ".".into())
            ),
            StepDone::Generate(g) => format!("The result was stored ({} bytes).", g.bytes),
            StepDone::Review(r) => {
                let verdict = match r.verdict {
                    Verdict::Passed => "passed",
                    Verdict::Issues => "found issues",
                    Verdict::NotVerified => "could not run (not verified)",
                };
                format!("The review {verdict}: {}", r.notes)
            }
            StepDone::Compare(c) => {
                let outcome = match c.outcome {
                    Some(CompareOutcome::Improved) => "better: delivered",
                    Some(CompareOutcome::Unchanged) => "no better: the previous version kept",
                    Some(CompareOutcome::Worse) => "worse: the previous version kept",
                    None => "could not run: the previous version kept",
                };
                format!("Compared with the version before: {outcome}.")
            }
        }
    }
}
