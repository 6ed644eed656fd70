//! Repairs and lineages (rule 14) as types: the repair request a person
//! sends (an instruction and nothing else: the settings are frozen), what a
//! comparison can conclude, and what a lineage's state allows next. Pure,
//! so a page can check an instruction with the server's own function.

use super::{FieldErrors, JobId, Review, Verdict};
use serde::{Deserialize, Serialize};

/// Repairs one lineage may take.
pub const REPAIRS_MAX: u32 = 2;
pub const INSTRUCTION_LEN_MAX: usize = 500;

/// What the comparison of a repair with the version the person had found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CompareOutcome {
    /// The candidate is delivered.
    Improved,
    /// The previous version is kept, and repairs stop.
    Unchanged,
    /// The previous version is kept, and repairs stop.
    Worse,
}

impl CompareOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CompareOutcome::Improved => "improved",
            CompareOutcome::Unchanged => "unchanged",
            CompareOutcome::Worse => "worse",
        }
    }

    pub fn parse(s: &str) -> Option<CompareOutcome> {
        [
            CompareOutcome::Improved,
            CompareOutcome::Unchanged,
            CompareOutcome::Worse,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

/// The compare step's record. `outcome` is `None` when the checker could
/// not run: the previous version is kept (nobody showed the candidate is
/// better) but repairs are not stopped (nobody showed it is not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparison {
    pub outcome: Option<CompareOutcome>,
    /// The version the candidate was compared with.
    pub against: JobId,
    pub notes: String,
}

impl Comparison {
    /// What the lineage does when the repair finishes.
    pub fn effect(&self) -> LineageEffect {
        match self.outcome {
            Some(CompareOutcome::Improved) => LineageEffect::Deliver,
            Some(CompareOutcome::Unchanged | CompareOutcome::Worse) => LineageEffect::KeepAndStop,
            None => LineageEffect::Keep,
        }
    }
}

/// A finished repair's effect on its lineage: the one place it is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineageEffect {
    /// The candidate becomes the delivered version.
    Deliver,
    /// The previous version stays, and no further repair is taken.
    KeepAndStop,
    /// The previous version stays; repairs remain possible.
    Keep,
}

/// Why a lineage takes no further repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairRefusal {
    /// A repair kept the previous version.
    Stopped,
    /// Two repairs were taken.
    LimitReached,
}

/// The shared state of a lineage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineageState {
    pub root: JobId,
    /// The version the person has now.
    pub delivered: JobId,
    pub repairs_used: u32,
    pub stopped: bool,
}

impl LineageState {
    /// A lineage nobody has repaired yet.
    pub fn fresh(root: JobId) -> LineageState {
        LineageState {
            root,
            delivered: root,
            repairs_used: 0,
            stopped: false,
        }
    }

    pub fn repairs_left(&self) -> u32 {
        if self.stopped {
            0
        } else {
            REPAIRS_MAX.saturating_sub(self.repairs_used)
        }
    }

    /// Whether a new repair may be taken, and if not, why. A stop is
    /// reported before the limit: it is the reason a person can act on.
    pub fn refusal(&self) -> Option<RepairRefusal> {
        if self.stopped {
            Some(RepairRefusal::Stopped)
        } else if self.repairs_used >= REPAIRS_MAX {
            Some(RepairRefusal::LimitReached)
        } else {
            None
        }
    }
}

/// Whether a repair is on the studio (issue 33, 2). A version whose review
/// found issues is repaired once at no charge: nobody should pay again to
/// mend a result we flagged ourselves. Once such a free repair is live
/// (queued, running, parked or done: a failed or cancelled one does not
/// count), or when the review passed or could not run, a repair is charged
/// like its parent.
pub fn repair_is_free(version_review: Option<&Review>, free_repair_live: bool) -> bool {
    version_review.is_some_and(|r| r.verdict == Verdict::Issues) && !free_repair_live
}

/// Parses a repair body: `{"instruction": "..."}` and nothing else (any
/// other field would change the frozen settings).
pub fn parse_repair(body: &serde_json::Value) -> Result<String, FieldErrors> {
    let mut errors = FieldErrors::default();
    let Some(map) = body.as_object() else {
        errors.add("body", "must be a JSON object with only \"instruction\"");
        return Err(errors);
    };
    for k in map.keys().filter(|k| k.as_str() != "instruction") {
        errors.add(
            k,
            "a repair keeps its original's settings; send only \"instruction\"",
        );
    }
    let instruction = match map.get("instruction") {
        Some(serde_json::Value::String(s)) => {
            let t = s.trim();
            if t.is_empty() {
                errors.add("instruction", "is required");
            } else if t.chars().count() > INSTRUCTION_LEN_MAX {
                errors.add(
                    "instruction",
                    format!("must be at most {INSTRUCTION_LEN_MAX} characters"),
                );
            } else if t.chars().any(|c| c.is_control() && c != '\n') {
                errors.add("instruction", "must not contain control characters");
            }
            t.to_string()
        }
        Some(_) => {
            errors.add("instruction", "must be a string");
            String::new()
        }
        None => {
            errors.add("instruction", "is required");
            String::new()
        }
    };
    if errors.is_empty() {
        Ok(instruction)
    } else {
        Err(errors)
    }
}

/// Which way a repair instruction asks the edit to move, in the words a
/// person uses. The local renderer follows it and the local checker judges
/// by it; an http model reads the instruction itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Stronger,
    Subtler,
    /// Neither: a fix the local checker can only judge by what stayed intact.
    Other,
}

pub fn direction(instruction: &str) -> Direction {
    let words: Vec<String> = instruction
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let has = |set: &[&str]| words.iter().any(|w| set.contains(&w.as_str()));
    let stronger = has(&[
        "stronger",
        "bolder",
        "more",
        "stitchier",
        "heavier",
        "intense",
        "intenser",
        "darker",
        "louder",
        "increase",
        "amplify",
    ]);
    let subtler = has(&[
        "subtler", "subtle", "softer", "less", "lighter", "gentler", "weaker", "fainter", "reduce",
        "tone", "milder",
    ]);
    match (stronger, subtler) {
        (true, false) => Direction::Stronger,
        (false, true) => Direction::Subtler,
        _ => Direction::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_flagged_version_is_repaired_once_for_free() {
        let review = |verdict| Review {
            verdict,
            notes: String::new(),
        };
        let issues = review(Verdict::Issues);
        assert!(repair_is_free(Some(&issues), false));
        assert!(!repair_is_free(Some(&issues), true));
        for other in [Verdict::Passed, Verdict::NotVerified] {
            assert!(!repair_is_free(Some(&review(other)), false));
        }
        assert!(!repair_is_free(None, false));
    }

    #[test]
    fn a_repair_body_is_an_instruction_and_nothing_else() {
        assert_eq!(
            parse_repair(&json!({"instruction": "  keep the leash photographic "})).unwrap(),
            "keep the leash photographic"
        );
        let e = parse_repair(&json!({"instruction": "x", "style": "quilt"})).unwrap_err();
        assert!(e.0.contains_key("style"));
        assert!(parse_repair(&json!({"instruction": ""})).is_err());
        assert!(parse_repair(&json!({"instruction": "   "})).is_err());
        assert!(parse_repair(&json!({"instruction": 3})).is_err());
        assert!(parse_repair(&json!({})).is_err());
        assert!(parse_repair(&json!([])).is_err());
        assert!(parse_repair(&json!({"instruction": "a\u{7}b"})).is_err());
        assert!(parse_repair(&json!({"instruction": "é".repeat(500)})).is_ok());
        assert!(parse_repair(&json!({"instruction": "é".repeat(501)})).is_err());
    }

    #[test]
    fn what_a_lineage_allows() {
        let root = JobId::new();
        let mut s = LineageState::fresh(root);
        assert_eq!((s.repairs_left(), s.refusal()), (2, None));
        s.repairs_used = 2;
        assert_eq!(
            (s.repairs_left(), s.refusal()),
            (0, Some(RepairRefusal::LimitReached))
        );
        s.repairs_used = 1;
        s.stopped = true;
        assert_eq!(
            (s.repairs_left(), s.refusal()),
            (0, Some(RepairRefusal::Stopped))
        );
    }

    #[test]
    fn outcomes_decide_the_lineage_in_one_place() {
        let c = |o| Comparison {
            outcome: o,
            against: JobId::new(),
            notes: String::new(),
        };
        assert_eq!(
            c(Some(CompareOutcome::Improved)).effect(),
            LineageEffect::Deliver
        );
        assert_eq!(
            c(Some(CompareOutcome::Unchanged)).effect(),
            LineageEffect::KeepAndStop
        );
        assert_eq!(
            c(Some(CompareOutcome::Worse)).effect(),
            LineageEffect::KeepAndStop
        );
        assert_eq!(c(None).effect(), LineageEffect::Keep);
        assert_eq!(CompareOutcome::parse("worse"), Some(CompareOutcome::Worse));
        assert_eq!(CompareOutcome::parse("better"), None);
    }

    #[test]
    fn directions_in_plain_words() {
        assert_eq!(direction("Make the stitches bolder"), Direction::Stronger);
        assert_eq!(direction("a bit subtler please"), Direction::Subtler);
        assert_eq!(direction("keep the leash photographic"), Direction::Other);
        assert_eq!(direction("more here, less there"), Direction::Other);
    }
}
