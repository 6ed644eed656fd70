//! A job's workflow as types: the steps each kind runs, in order, and what
//! each step leaves behind (rule 6). The outputs travel together as one
//! `Progress` document, written with the run's durable writes, so a resumed
//! run skips what is recorded and reuses it.
//!
//! Paid steps are not steps here: every provider call is an attempt of its
//! own (rule 7), written before it is made and settled after.

use serde::{Deserialize, Serialize};

/// One step of a job's workflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// The local check before anything is paid for: is there something to
    /// change, and is it unambiguous (rule 14).
    Readiness,
    /// The paid call (its attempts, retries and fallbacks) and the output
    /// stored put-if-absent at the job's key (rule 8).
    Generate,
    /// The checker's review of output and photo after the call.
    Review,
    /// A repair only: the checker compares the candidate with the version
    /// the person has, which decides the one delivered (rule 14).
    Compare,
}

impl Step {
    /// The steps of each kind, in order: the one place they are listed. A
    /// repair's target was found by its original's readiness check.
    pub fn of(kind: super::JobKind, repair: bool) -> &'static [Step] {
        match (kind, repair) {
            (super::JobKind::ImageEdit, false) => &[Step::Readiness, Step::Generate, Step::Review],
            (super::JobKind::ImageEdit, true) => &[Step::Generate, Step::Review, Step::Compare],
            (super::JobKind::Video, _) => &[Step::Generate],
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Readiness => "readiness",
            Step::Generate => "generate",
            Step::Review => "review",
            Step::Compare => "compare",
        }
    }

    /// Whether `progress` records this step as done.
    pub fn is_done(self, progress: &Progress) -> bool {
        match self {
            Step::Readiness => progress.readiness.is_some(),
            Step::Generate => progress.output.is_some(),
            Step::Review => progress.review.is_some(),
            Step::Compare => progress.compare.is_some(),
        }
    }
}

/// What a job's completed steps produced.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<StoredOutput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<super::Comparison>,
}

/// The readiness check found what to change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Readiness {
    /// How much of the picture the change may touch (0 to 1, three places).
    pub region_fraction: f64,
    /// What the checker saw, passed to the edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<String>,
}

/// The output, stored at the job's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredOutput {
    pub key: String,
    pub content_type: String,
    pub bytes: u64,
    /// The attempt that produced it (`None` when a resumed run found the
    /// object already stored and could not tell which).
    pub attempt_no: Option<i32>,
    pub model: Option<String>,
}

/// What the review after the call found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Review {
    pub verdict: Verdict,
    pub notes: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Passed,
    Issues,
    /// The reviewer could not run: never read as "passed" (rule 14).
    NotVerified,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobKind;

    #[test]
    fn steps_per_kind_and_done() {
        assert_eq!(
            Step::of(JobKind::ImageEdit, false),
            &[Step::Readiness, Step::Generate, Step::Review]
        );
        assert_eq!(
            Step::of(JobKind::ImageEdit, true),
            &[Step::Generate, Step::Review, Step::Compare]
        );
        assert_eq!(Step::of(JobKind::Video, false), &[Step::Generate]);
        let mut p = Progress::default();
        assert!(!Step::Readiness.is_done(&p));
        p.readiness = Some(Readiness {
            region_fraction: 0.2,
            observation: None,
        });
        assert!(Step::Readiness.is_done(&p));
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"readiness": {"region_fraction": 0.2}})
        );
        let back: Progress = serde_json::from_value(json).unwrap();
        assert_eq!(back, p);
        let empty: Progress = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, Progress::default());
    }
}
