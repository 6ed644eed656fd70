//! Reviewer form posts (rule 12): a decision on one record, a note, and one
//! decision for every open record a filter matches. Each checks the role
//! with the engine's extractor, calls the engine, leaves a flash and
//! redirects back (post/redirect/get). The reviewer is the session's user.

use super::forms::report;
use crate::data::flash;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::response::Redirect;
use axum::routing::{post, MethodRouter};
use axum::{Form, Router};
use serde::Deserialize;
use tollgate::model::ParkedId;
use tollgate::model::ReviewAction;
use tollgate::usecases::auth::{Authorized, ReviewerOnly};
use tollgate::usecases::parked::{parse_action, BulkOutcome, DecisionRequest, PARKED_PAGE_DEFAULT};
use tollgate::{Error, Tollgate};
use tower_sessions::Session;

/// The review forms, each once: the router is made from this list, and the
/// role matrix test (`app/tests/roles.rs`) reads it.
pub fn routes() -> Vec<(&'static str, MethodRouter<Tollgate>)> {
    vec![
        ("/review/{id}/decide", post(decide)),
        ("/review/{id}/note", post(note)),
        ("/review/bulk", post(bulk)),
    ]
}

pub fn router(tollgate: Tollgate) -> Router {
    super::routed(routes()).with_state(tollgate)
}

fn record_id(raw: &str) -> Result<ParkedId, Error> {
    raw.parse().map_err(|_| Error::NotFound("parked record"))
}

/// A checkbox or radio: "1" is yes, "0" is no, absent is not said.
fn yes_no(v: &Option<String>) -> Option<bool> {
    match v.as_deref() {
        Some("1") | Some("on") | Some("true") => Some(true),
        Some("0") | Some("false") => Some(false),
        _ => None,
    }
}

#[derive(Deserialize)]
pub struct DecisionForm {
    action: String,
    #[serde(default)]
    evidence: String,
    provider_job_id: Option<String>,
    refund: Option<String>,
    release_hold: Option<String>,
    confirm: Option<String>,
}

impl DecisionForm {
    /// The decision the form asks for: its action parsed, and only that
    /// action's fields taken (the form shows every action's).
    fn request(&self) -> Result<DecisionRequest, Error> {
        let action = parse_action(&self.action)?;
        let accounting = action == ReviewAction::AcceptFailure;
        Ok(DecisionRequest {
            action,
            evidence: self.evidence.clone(),
            provider_job_id: (action == ReviewAction::Reconcile)
                .then(|| self.provider_job_id.clone().unwrap_or_default()),
            refund: accounting.then(|| yes_no(&self.refund)).flatten(),
            release_hold: accounting.then(|| yes_no(&self.release_hold)).flatten(),
        })
    }
}

async fn decide(
    State(t): State<Tollgate>,
    who: Authorized<ReviewerOnly>,
    session: Session,
    Path(id): Path<String>,
    form: Result<Form<DecisionForm>, FormRejection>,
) -> Redirect {
    let back = format!("/review/{id}");
    let back = if id.len() <= 64 {
        back
    } else {
        "/review".into()
    };
    let result = async {
        let Form(f) = form.map_err(|e| Error::invalid("form", e.body_text()))?;
        let request = f.request()?;
        if request.action == ReviewAction::NewAttempt && yes_no(&f.confirm) != Some(true) {
            return Err(Error::invalid(
                "confirm",
                "confirm that you understand the possible duplicate cost",
            ));
        }
        let (d, created) = t.decide(who.user(), record_id(&id)?, &request).await?;
        Ok::<_, Error>((d, created))
    }
    .await;
    match result {
        Ok((d, true)) => {
            let what = match d.action {
                ReviewAction::Reconcile => {
                    "Reconciled: the record now waits for its own decision on polling.".to_string()
                }
                ReviewAction::ResumePoll => {
                    "Recorded. A worker will claim it and resume the status checks.".to_string()
                }
                ReviewAction::RetryDelivery => {
                    "Recorded. A worker will claim it and fetch the output again.".to_string()
                }
                ReviewAction::AcceptFailure => {
                    "Recorded. The job ended failed with the accounting you chose.".to_string()
                }
                ReviewAction::NewAttempt => format!(
                    "Recorded. A new attempt was ordered as job {}.",
                    d.new_job_id.map(|j| j.to_string()).unwrap_or_default()
                ),
            };
            flash::ok(&session, what).await;
            Redirect::to(&back)
        }
        Ok((d, false)) => {
            flash::ok(
                &session,
                format!(
                    "That decision was already recorded by {}.",
                    d.reviewer_email.as_str()
                ),
            )
            .await;
            Redirect::to(&back)
        }
        Err(e) => report(&session, e, &back).await,
    }
}

#[derive(Deserialize)]
pub struct NoteForm {
    #[serde(default)]
    text: String,
}

async fn note(
    State(t): State<Tollgate>,
    who: Authorized<ReviewerOnly>,
    session: Session,
    Path(id): Path<String>,
    form: Result<Form<NoteForm>, FormRejection>,
) -> Redirect {
    let back = if id.len() <= 64 {
        format!("/review/{id}")
    } else {
        "/review".into()
    };
    let result = async {
        let Form(f) = form.map_err(|e| Error::invalid("form", e.body_text()))?;
        t.note_parked(who.user(), record_id(&id)?, &f.text).await
    }
    .await;
    match result {
        Ok(_) => {
            flash::ok(&session, "Note added to the job's timeline.").await;
            Redirect::to(&back)
        }
        Err(e) => report(&session, e, &back).await,
    }
}

#[derive(Deserialize)]
pub struct BulkForm {
    stage: Option<String>,
    model: Option<String>,
    age: Option<String>,
    /// The count the reviewer was shown and confirmed.
    expected: Option<String>,
    #[serde(flatten)]
    decision: DecisionForm,
}

/// What a bulk decision did, in a sentence or three: how many were
/// decided, whether the matching set changed since the reviewer confirmed,
/// and why some were skipped.
fn bulk_outcome_words(out: &BulkOutcome, expected: Option<&str>) -> String {
    let mut message = format!(
        "Decided {} record{}.",
        out.decided.len(),
        if out.decided.len() == 1 { "" } else { "s" }
    );
    if let Some(expected) = expected.and_then(|e| e.parse::<i64>().ok()) {
        let seen = (out.decided.len() + out.skipped.len()) as i64;
        if seen != expected {
            message.push_str(&format!(
                " {expected} matched when you confirmed; {seen} matched when it ran."
            ));
        }
    }
    if !out.skipped.is_empty() {
        message.push_str(&format!(
            " Skipped {}: {}.",
            out.skipped.len(),
            out.skipped
                .iter()
                .take(10)
                .map(|(id, why)| format!("{} ({why})", &id.to_string()[..8]))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    message
}

async fn bulk(
    State(t): State<Tollgate>,
    who: Authorized<ReviewerOnly>,
    session: Session,
    form: Result<Form<BulkForm>, FormRejection>,
) -> Redirect {
    let Form(f) = match form {
        Ok(f) => f,
        Err(e) => return report(&session, Error::invalid("form", e.body_text()), "/review").await,
    };
    let filters = crate::data::ReviewFilters {
        stage: f.stage.clone(),
        state: None,
        model: f.model.clone(),
        age: f.age.clone(),
        sort: None,
        cursor: None,
    };
    let back = match filters.query() {
        q if q.is_empty() => "/review".to_string(),
        q => format!("/review?{q}"),
    };
    if yes_no(&f.decision.confirm) != Some(true) {
        return report(
            &session,
            Error::invalid("confirm", "confirm the number of records first"),
            &back,
        )
        .await;
    }
    let (query, mut request) = match filters
        .parked_query(PARKED_PAGE_DEFAULT)
        .and_then(|q| Ok((q, f.decision.request()?)))
    {
        Ok(both) => both,
        Err(e) => return report(&session, e, &back).await,
    };
    // The bulk form's accounting is two checkboxes: unchecked says no.
    if request.action == ReviewAction::AcceptFailure {
        request.refund = request.refund.or(Some(false));
        request.release_hold = request.release_hold.or(Some(false));
    }
    match t.decide_bulk(who.user(), &query, &request).await {
        Ok(out) => {
            let message = bulk_outcome_words(&out, f.expected.as_deref());
            flash::ok(&session, message).await;
            Redirect::to(&back)
        }
        Err(e) => report(&session, e, &back).await,
    }
}
