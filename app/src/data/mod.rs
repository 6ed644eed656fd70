//! What pages show, and the server functions that fetch it. Each server
//! function checks the caller's role through the engine's one guard and
//! calls the engine; there is no SQL here.

mod admin_jobs;
mod edit;
pub mod flash;
mod parked;
mod review;
mod spend;
mod timeline;
mod webhooks;

pub use admin_jobs::*;
pub use edit::*;
pub use flash::{Flash, FlashKind};
pub use parked::{ParkedFacts, ParkedRow};
pub use review::*;
pub use spend::*;
pub use timeline::EventRow;
pub use webhooks::*;

use leptos::prelude::*;
use serde::{Deserialize, Serialize};
use tollgate::model::{LedgerKind, Role};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Me {
    pub id: String,
    pub email: String,
    pub role: Role,
}

/// Everything the layout needs: who is signed in, and any flash message.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PageContext {
    pub me: Option<Me>,
    pub flash: Option<Flash>,
}

/// One page of a list as the pages show it: its rows, the cursors either
/// way, and where it sits ("51–100 of 116") when that was counted.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Paged<T> {
    pub rows: Vec<T>,
    /// The cursor of the next page; `None` on the last.
    pub next: Option<String>,
    /// The cursor of the previous page; `None` on the first.
    pub prev: Option<String>,
    pub place: Option<PagePlace>,
}

/// Rows before a page, and in the whole list.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct PagePlace {
    pub before: u64,
    pub total: u64,
}

impl<T> Paged<T> {
    /// Nothing in the list at all (not merely on this page).
    pub fn list_is_empty(&self) -> bool {
        self.rows.is_empty() && self.prev.is_none() && self.next.is_none()
    }
}

#[cfg(feature = "ssr")]
fn paged<T, U>(page: tollgate::usecases::cursor::Page<T>, row: impl FnMut(T) -> U) -> Paged<U> {
    let place = page.place.map(|p| PagePlace {
        before: p.before,
        total: p.total,
    });
    let page = page.map(row);
    Paged {
        rows: page.items,
        next: page.next,
        // The first page has nothing before it, whatever a stale cursor says.
        prev: page.prev.filter(|_| place.is_none_or(|p| p.before > 0)),
        place,
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EntryRow {
    pub when: String,
    pub kind: LedgerKind,
    pub amount: i64,
    pub reference: String,
    pub reason: Option<String>,
    /// The edit it charged or refunded: its id and what was ordered.
    pub job: Option<(String, tollgate::model::JobRequest)>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CreditsData {
    pub balance: i64,
    pub entries: Paged<EntryRow>,
}

/// Ledger entries a page on `/credits`.
pub const CREDITS_PAGE: i64 = 50;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub prefix: String,
    pub created: String,
    pub last_used: Option<String>,
    pub revoked: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct UserRow {
    pub id: String,
    pub email: String,
    pub role: Role,
    pub disabled: bool,
    pub balance: i64,
    pub created: String,
    pub is_me: bool,
}

#[cfg(feature = "ssr")]
mod ssr {
    use leptos::prelude::*;
    use tollgate::model::Role;
    use tollgate::usecases::auth::{Principal, ResolvedPrincipal};
    pub use tollgate::usecases::jobs::JobQuery;
    use tollgate::Tollgate;

    pub fn engine() -> Result<Tollgate, ServerFnError> {
        use_context::<Tollgate>().ok_or_else(|| ServerFnError::new("the engine is not available"))
    }

    /// The request's principal, as the guard middleware resolved it.
    pub async fn principal() -> Result<Option<Principal>, ServerFnError> {
        let axum::Extension(ResolvedPrincipal(p)) =
            leptos_axum::extract::<axum::Extension<ResolvedPrincipal>>().await?;
        Ok(p)
    }

    /// The principal, when their role allows `role`; the engine's guard decides.
    pub async fn require(role: Role) -> Result<Principal, ServerFnError> {
        let p = principal()
            .await?
            .ok_or_else(|| ServerFnError::new(tollgate::Error::Unauthenticated.public_message()))?;
        p.require(role)
            .map_err(|e| ServerFnError::new(e.public_message()))?;
        Ok(p)
    }

    pub fn fail(e: tollgate::Error) -> ServerFnError {
        if let tollgate::Error::Internal(cause) = &e {
            tracing::error!(%cause, "internal error in a server function");
        }
        ServerFnError::new(e.public_message())
    }

    pub fn when(t: chrono::DateTime<chrono::Utc>) -> String {
        t.format("%Y-%m-%d %H:%M UTC").to_string()
    }
}

#[server]
pub async fn load_page_context() -> Result<PageContext, ServerFnError> {
    use ssr::*;
    let me = principal().await?.map(|p| Me {
        id: p.user.id.to_string(),
        email: p.user.email.to_string(),
        role: p.user.role,
    });
    let mut flash = flash::take().await;
    // A secret made by the last form post arrives in its own cookie, once.
    let headers = leptos_axum::extract::<axum::http::HeaderMap>().await?;
    let secure = engine()?.config().secure_cookies;
    let secret = if flash::has_secret(&headers, secure) {
        flash::clear_secret(secure);
        let session = leptos_axum::extract::<tower_sessions::Session>().await?;
        flash::take_secret(&session, &headers, secure).await
    } else {
        None
    };
    if let Some(secret) = secret {
        match flash.as_mut() {
            Some(f) => f.secret = Some(secret),
            None => {
                flash = Some(Flash {
                    kind: FlashKind::Ok,
                    message: "Your new secret:".into(),
                    secret: Some(secret),
                    email: None,
                })
            }
        }
    }
    Ok(PageContext { me, flash })
}

#[server]
pub async fn setup_needed() -> Result<bool, ServerFnError> {
    ssr::engine()?.setup_needed().await.map_err(ssr::fail)
}

#[server]
pub async fn my_credits(cursor: Option<String>) -> Result<CreditsData, ServerFnError> {
    use ssr::*;
    let p = require(Role::User).await?;
    let t = engine()?;
    let q = tollgate::usecases::ledger::LedgerQuery::parse(CREDITS_PAGE, cursor.as_deref())
        .map_err(fail)?;
    let page = t.ledger_page(&p.user, &q).await.map_err(fail)?;
    let balance = t.user(p.user.id).await.map_err(fail)?.balance.get();
    Ok(CreditsData {
        balance,
        entries: paged(page, |line| EntryRow {
            when: when(line.entry.created_at),
            kind: line.entry.kind,
            amount: line.entry.amount.get(),
            reference: line.entry.reference,
            reason: line.entry.reason,
            job: line.job.map(|j| (j.id.to_string(), j.request)),
        }),
    })
}

#[server]
pub async fn my_tokens() -> Result<Vec<TokenRow>, ServerFnError> {
    use ssr::*;
    let p = require(Role::User).await?;
    let tokens = engine()?.api_tokens(&p.user).await.map_err(fail)?;
    Ok(tokens
        .into_iter()
        .map(|t| TokenRow {
            id: t.id.to_string(),
            name: t.name,
            prefix: t.prefix,
            created: when(t.created_at),
            last_used: t.last_used_at.map(when),
            revoked: t.revoked_at.is_some(),
        })
        .collect())
}

#[server]
pub async fn all_users() -> Result<Vec<UserRow>, ServerFnError> {
    use ssr::*;
    let p = require(Role::Admin).await?;
    let users = engine()?.list_users().await.map_err(fail)?;
    Ok(users
        .into_iter()
        .map(|u| UserRow {
            is_me: u.id == p.user.id,
            id: u.id.to_string(),
            email: u.email.to_string(),
            role: u.role,
            disabled: u.disabled,
            balance: u.balance.get(),
            created: u.created_at.format("%Y-%m-%d").to_string(),
        })
        .collect())
}

/// One job as the Edits pages show it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobRow {
    pub id: String,
    pub kind: tollgate::model::JobKind,
    pub status: tollgate::model::JobStatus,
    pub request: tollgate::model::JobRequest,
    pub credits: i64,
    pub estimated_usd: String,
    pub created: String,
    pub completed: Option<String>,
    pub error: Option<String>,
    /// Clarifying questions when the photo was not ready.
    pub questions: Vec<String>,
    pub output_url: Option<String>,
    pub output_content_type: Option<String>,
    /// What the review after the call found, when one ran.
    pub review: Option<tollgate::model::Review>,
    /// A repair's instruction.
    pub instruction: Option<String>,
    /// A finished repair that did not improve: `output_url` is the version
    /// kept, and the candidate is here.
    pub candidate_url: Option<String>,
    /// The job a reviewer's new attempt replaced, and the one that replaced
    /// this job: each page links to the other.
    pub replaces: Option<String>,
    pub replaced_by: Option<String>,
    /// On a lineage's card (`/edits`): the version the person has now,
    /// and how many repairs were asked for.
    pub delivered_url: Option<String>,
    pub repairs: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AttemptRow {
    pub provider: String,
    pub model: String,
    pub attempt_no: i32,
    pub state: tollgate::model::AttemptState,
    pub error_class: Option<tollgate::model::ErrorClass>,
    pub provider_job_id: Option<String>,
    pub duration_ms: Option<i64>,
    /// None is unpriced (shown as such, never as zero).
    pub cost_usd: Option<String>,
    pub cost_source: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct JobDetail {
    pub job: JobRow,
    /// The detailed timeline: for reviewers and admins only.
    pub events: Vec<EventRow>,
    /// The timeline in plain words, for everyone who may see the job.
    pub story: Vec<StoryRow>,
    pub lineage: Option<LineageView>,
    pub attempts: Vec<AttemptRow>,
    /// Why the job waits for a person, when it is parked.
    pub parked: Option<ParkedRow>,
    /// How long its photos are kept, in words ("30 days after the edit and
    /// its repairs finish"), or that they were removed.
    pub kept: String,
}

/// What the New edit page needs: the catalogue (so the island prices with
/// the same `quote` the server charges with) and a fresh idempotency key.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Composer {
    pub catalogue: tollgate::model::Catalogue,
    pub idempotency_key: String,
    pub balance: i64,
    /// "Change and order again": an earlier edit's settings and photo.
    pub prefill: Option<Prefill>,
    /// Today's spending is paused (halted, or the cap is used): an order
    /// now would be refunded, so the page says so before the click.
    pub spending_paused: bool,
}

/// The settings of an earlier edit, to start a new one from.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Prefill {
    pub asset_id: String,
    pub width: u32,
    pub height: u32,
    pub target: tollgate::model::TargetKind,
    pub description: String,
    pub style: String,
    pub strength: tollgate::model::Strength,
    /// The questions the earlier edit was stopped with.
    pub questions: Vec<String>,
}

impl JobRow {
    /// Done, but its review found issues: shown as such, never as plain
    /// "Done" (issue 33, 2).
    pub fn flagged(&self) -> bool {
        self.status == tollgate::model::JobStatus::Succeeded
            && self
                .review
                .as_ref()
                .is_some_and(|r| r.verdict == tollgate::model::Verdict::Issues)
    }
}

#[cfg(feature = "ssr")]
fn job_row(j: tollgate::store::Job) -> JobRow {
    let succeeded = j.status == tollgate::model::JobStatus::Succeeded;
    let error = j.error.clone();
    JobRow {
        questions: (error.as_ref())
            .and_then(|e| e.questions.clone())
            .unwrap_or_default(),
        output_url: (succeeded && j.output_content_type.is_some())
            .then(|| format!("/v1/jobs/{}/output", j.delivers())),
        candidate_url: j
            .retained_previous()
            .then(|| format!("/v1/jobs/{}/output", j.id)),
        instruction: j.instruction.clone(),
        replaces: j.replaces.map(|id| id.to_string()),
        replaced_by: j.replaced_by.map(|id| id.to_string()),
        delivered_url: None,
        repairs: 0,
        output_content_type: j.output_content_type.clone(),
        review: j.review.clone(),
        id: j.id.to_string(),
        kind: j.kind,
        status: j.status,
        request: j.request,
        credits: j.credits.get(),
        estimated_usd: j.estimated_usd.dollars(),
        created: ssr::when(j.created_at),
        completed: j.completed_at.map(ssr::when),
        // A failure stored without words still says which it was.
        error: error.map(|e| {
            if e.message.is_empty() {
                e.code.as_str().to_string()
            } else {
                e.message
            }
        }),
    }
}

/// Edits a page on `/edits`: four rows of the widest grid.
pub const EDITS_PAGE: i64 = 24;
/// Jobs a page on `/admin/jobs`.
pub const ADMIN_JOBS_PAGE: i64 = 50;

#[server]
pub async fn my_jobs(cursor: Option<String>) -> Result<Paged<JobRow>, ServerFnError> {
    use ssr::*;
    let p = require(Role::User).await?;
    let mut q = JobQuery::parse(None, Some(EDITS_PAGE), cursor.as_deref()).map_err(fail)?;
    q.counted = true;
    // One card per edit and its repairs (issue 33, 6).
    q.lineages_as_one = true;
    let t = engine()?;
    let tollgate::usecases::cursor::Page {
        items,
        next,
        prev,
        place,
    } = t.list_jobs(&p.user, &q).await.map_err(fail)?;
    let items = t.job_views(items).await.map_err(fail)?;
    let page = tollgate::usecases::cursor::Page {
        items,
        next,
        prev,
        place,
    };
    Ok(paged(page, lineage_card))
}

/// A lineage's card: its first edit, showing the version the person has.
#[cfg(feature = "ssr")]
fn lineage_card(v: tollgate::usecases::jobs::JobView) -> JobRow {
    let mut row = job_row(v.job);
    if let (Some(l), tollgate::model::JobStatus::Succeeded) = (v.lineage, row.status) {
        row.delivered_url = Some(format!("/v1/jobs/{}/output", l.delivered));
        row.repairs = l.repairs_used;
    }
    row
}

#[server]
pub async fn load_job_detail(id: String) -> Result<JobDetail, ServerFnError> {
    use ssr::*;
    let p = require(Role::User).await?;
    let id = id
        .parse()
        .map_err(|_| fail(tollgate::Error::NotFound("edit")))?;
    let t = engine()?;
    let tollgate::usecases::jobs::JobDetail {
        view,
        events,
        parked,
    } = t.job_detail(&p.user, id).await.map_err(fail)?;
    let job = view.job;
    let lineage = edit::ssr::lineage_view(&t, &p.user, &job, view.lineage)
        .await
        .map_err(fail)?;
    let story = edit::ssr::story(&events);
    let detailed = p.user.role.allows(Role::Reviewer);
    let parked = match parked {
        // A replaced job's page says so once, with the link (`Replacement`).
        _ if job.replaced_by.is_some() => None,
        None => None,
        Some((p, decision)) => parked::parked_row(p, decision, job.status, detailed),
    };
    let kept = kept_words(
        t.config().retention.media_days,
        job.media_purged_at.is_some(),
    );
    Ok(JobDetail {
        kept,
        lineage,
        story,
        parked,
        attempts: (view.attempts.into_iter())
            .map(|a| attempt_row(a, detailed))
            .collect(),
        job: job_row(job),
        events: events
            .into_iter()
            .filter(|_| detailed)
            .map(|e| EventRow::of(&e))
            .collect(),
    })
}

#[cfg(feature = "ssr")]
/// An attempt for the job's page; the provider's id for the studio's
/// staff only.
fn attempt_row(a: tollgate::store::Attempt, staff: bool) -> AttemptRow {
    AttemptRow {
        provider: a.provider,
        model: a.model,
        attempt_no: a.attempt_no,
        state: a.state,
        error_class: a.error_class,
        provider_job_id: a.provider_job_id.filter(|_| staff),
        duration_ms: a.duration_ms,
        cost_usd: a.cost_usd.map(|c| c.to_string()),
        cost_source: a.cost_source.map(|c| c.as_str().to_string()),
    }
}

/// The retention policy for a person's photos, in words.
#[cfg(feature = "ssr")]
fn kept_words(days: Option<u32>, purged: bool) -> String {
    match (purged, days) {
        (true, Some(d)) => format!("This edit's photos were removed {d} days after it finished, as this studio keeps them no longer."),
        (true, None) => "This edit's photos were removed.".into(),
        (false, Some(d)) => format!("Your photo and its results are kept for {d} days after this edit and its repairs finish, then removed."),
        (false, None) => "Your photo and its results are kept until you or an admin remove them.".into(),
    }
}

#[server]
pub async fn load_composer(from: Option<String>) -> Result<Composer, ServerFnError> {
    use ssr::*;
    let p = require(Role::User).await?;
    let t = engine()?;
    let fresh = t.user(p.user.id).await.map_err(fail)?;
    // Only the person's own edit, and only its photo they uploaded.
    let mut prefill = None;
    if let Some(id) = from.and_then(|f| f.parse::<tollgate::model::JobId>().ok()) {
        if let Ok(job) = t.visible_job(&p.user, id).await {
            if let (true, tollgate::model::JobRequest::ImageEdit(e)) =
                (job.user_id == p.user.id, &job.request)
            {
                let asset = match t.visible_asset(&p.user, e.source).await {
                    Ok(asset) => Some(asset),
                    Err(tollgate::Error::NotFound(_)) => None,
                    Err(e) => return Err(fail(e)),
                };
                if let Some(asset) = asset {
                    prefill = Some(Prefill {
                        asset_id: asset.id.to_string(),
                        width: asset.width,
                        height: asset.height,
                        target: e.target.kind,
                        description: e.target.description.clone(),
                        style: e.style.clone(),
                        strength: e.strength,
                        questions: job_row(job.clone()).questions,
                    });
                }
            }
        }
    }
    Ok(Composer {
        catalogue: t.catalogue().clone(),
        idempotency_key: format!("edit-{}", uuid::Uuid::new_v4()),
        balance: fresh.balance.get(),
        prefill,
        spending_paused: t.spending_paused_now().await.map_err(fail)?,
    })
}

/// The API reference, read from the OpenAPI document the engine generates
/// from its routes (so the page cannot drift from what is served).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ApiReference {
    pub title: String,
    pub description: String,
    pub groups: Vec<ApiGroup>,
    pub schemas: Vec<ApiSchema>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ApiGroup {
    pub tag: String,
    pub description: String,
    pub operations: Vec<ApiOperation>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ApiOperation {
    pub id: String,
    pub method: String,
    pub path: String,
    pub summary: String,
    pub signed_in: bool,
    pub params: Vec<ApiField>,
    /// (media type, schema as words)
    pub body: Vec<(String, String)>,
    pub responses: Vec<ApiResponse>,
    /// A `curl` command that makes the call, built from the document.
    pub example: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ApiResponse {
    pub status: String,
    pub description: String,
    /// The schema as words (a schema's name links to it).
    pub schema: Option<String>,
    pub links: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ApiField {
    pub name: String,
    /// Where a parameter goes (path, query, header), or empty for a field.
    pub place: String,
    pub required: bool,
    pub kind: String,
    pub description: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ApiSchema {
    pub name: String,
    pub description: String,
    /// Its fields, for an object; empty otherwise.
    pub fields: Vec<ApiField>,
    /// What it is, for anything but an object (an enum, a string pattern).
    pub kind: String,
}

#[server]
pub async fn load_api_reference() -> Result<ApiReference, ServerFnError> {
    let doc = serde_json::to_value(tollgate::api::document())
        .map_err(|e| ServerFnError::new(e.to_string()))?;
    Ok(reference::build(&doc))
}

/// Turns the OpenAPI document into what the reference page shows.
#[cfg(feature = "ssr")]
mod reference {
    use super::*;
    use serde_json::Value;

    fn text(v: &Value) -> String {
        v.as_str().unwrap_or_default().to_string()
    }

    fn ref_name(v: &Value) -> Option<String> {
        v["$ref"]
            .as_str()
            .and_then(|r| r.rsplit('/').next())
            .map(str::to_string)
    }

    /// A schema in a few words: `JobObject`, `string (uuid)`, `one of a | b`.
    pub fn kind(v: &Value) -> String {
        if let Some(name) = ref_name(v) {
            return name;
        }
        if let Some(all) = v["oneOf"].as_array().or(v["anyOf"].as_array()) {
            return all.iter().map(kind).collect::<Vec<_>>().join(" or ");
        }
        if let Some(all) = v["allOf"].as_array() {
            return all.iter().map(kind).collect::<Vec<_>>().join(" and ");
        }
        if let Some(values) = v["enum"].as_array() {
            let values: Vec<String> = values
                .iter()
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| x.to_string())
                })
                .collect();
            return format!("one of {}", values.join(" | "));
        }
        let types: Vec<String> = match &v["type"] {
            Value::String(t) => vec![t.clone()],
            Value::Array(ts) => ts.iter().map(text).collect(),
            _ => Vec::new(),
        };
        let nullable = types.iter().any(|t| t == "null");
        let main: Vec<&String> = types.iter().filter(|t| *t != "null").collect();
        let mut out = match main.first().map(|s| s.as_str()) {
            Some("array") => format!("array of {}", kind(&v["items"])),
            Some("object") if v["additionalProperties"].is_object() => {
                format!("map to {}", kind(&v["additionalProperties"]))
            }
            Some(t) => t.to_string(),
            None if v.as_object().is_some_and(|o| o.is_empty()) => "any JSON".into(),
            None => "value".into(),
        };
        if let Some(f) = v["format"].as_str() {
            out.push_str(&format!(" ({f})"));
        }
        let mut limits = Vec::new();
        for (key, word) in [
            ("minLength", "at least"),
            ("maxLength", "at most"),
            ("minimum", "≥"),
            ("maximum", "≤"),
        ] {
            if let Some(n) = v[key].as_f64() {
                let unit = if key.ends_with("Length") {
                    " chars"
                } else {
                    ""
                };
                limits.push(format!("{word} {n}{unit}"));
            }
        }
        if let Some(p) = v["pattern"].as_str() {
            limits.push(format!("matching {p}"));
        }
        if !limits.is_empty() {
            out.push_str(&format!(", {}", limits.join(", ")));
        }
        if nullable {
            out.push_str(", or null");
        }
        out
    }

    fn fields(v: &Value) -> Vec<ApiField> {
        let required: Vec<String> = v["required"]
            .as_array()
            .map(|r| r.iter().map(text).collect())
            .unwrap_or_default();
        v["properties"]
            .as_object()
            .map(|props| {
                props
                    .iter()
                    .map(|(name, p)| ApiField {
                        name: name.clone(),
                        place: String::new(),
                        required: required.contains(name),
                        kind: kind(p),
                        description: text(&p["description"]),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn build(doc: &Value) -> ApiReference {
        let mut groups: Vec<ApiGroup> = doc["tags"]
            .as_array()
            .map(|tags| {
                tags.iter()
                    .map(|t| ApiGroup {
                        tag: text(&t["name"]),
                        description: text(&t["description"]),
                        operations: Vec::new(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let paths = doc["paths"].as_object().into_iter().flatten();
        for (path, item) in paths {
            for (method, op) in item.as_object().into_iter().flatten() {
                let tag = op["tags"][0].as_str().unwrap_or("other").to_string();
                let operation = operation(path, method, op, doc);
                match groups.iter_mut().find(|g| g.tag == tag) {
                    Some(g) => g.operations.push(operation),
                    None => groups.push(ApiGroup {
                        tag,
                        description: String::new(),
                        operations: vec![operation],
                    }),
                }
            }
        }
        ApiReference {
            title: text(&doc["info"]["title"]),
            description: text(&doc["info"]["description"]),
            groups,
            schemas: schemas(doc),
        }
    }

    fn operation(path: &str, method: &str, op: &Value, doc: &Value) -> ApiOperation {
        ApiOperation {
            example: example::curl(path, method, op, doc),
            id: text(&op["operationId"]),
            method: method.to_uppercase(),
            path: path.to_string(),
            summary: text(&op["summary"]),
            signed_in: op["security"].is_array(),
            params: op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| ApiField {
                    name: text(&p["name"]),
                    place: text(&p["in"]),
                    required: p["required"].as_bool().unwrap_or(false),
                    kind: kind(&p["schema"]),
                    description: text(&p["description"]),
                })
                .collect(),
            body: op["requestBody"]["content"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(media, m)| (media.clone(), kind(&m["schema"])))
                .collect(),
            responses: op["responses"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(status, r)| response(status, r))
                .collect(),
        }
    }

    /// Examples people can paste: the call as `curl`, with a body made
    /// from the schema (its own examples where it has them, else a value
    /// of the right kind), only the required fields, tokens as variables.
    mod example {
        use serde_json::{json, Map, Value};

        pub fn curl(path: &str, method: &str, op: &Value, doc: &Value) -> String {
            let mut lines = vec![format!(
                "curl -X {} \"$TOLLGATE_URL{}\"",
                method.to_uppercase(),
                path_with_samples(path)
            )];
            if op["security"].is_array() {
                lines.push("-H \"Authorization: Bearer $TOLLGATE_TOKEN\"".into());
            }
            let wants_key = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["in"] == "header" && p["name"].as_str() == Some("Idempotency-Key"));
            if wants_key {
                lines.push("-H \"Idempotency-Key: $(uuidgen)\"".into());
            }
            let content = op["requestBody"]["content"].as_object();
            if let Some((media, m)) = content.and_then(|c| c.iter().next()) {
                if media == "application/json" {
                    let body = sample(&m["schema"], doc, 0);
                    lines.push("-H \"Content-Type: application/json\"".into());
                    lines.push(format!("-d '{body}'"));
                } else {
                    lines.push(format!("-H \"Content-Type: {}\"", upload_type(media)));
                    lines.push("--data-binary @photo.jpg".into());
                }
            }
            lines.join(" \\\n  ")
        }

        fn upload_type(media: &str) -> &str {
            if media.ends_with("/*") || media == "application/octet-stream" {
                "image/jpeg"
            } else {
                media
            }
        }

        /// `/v1/jobs/{id}` with a made-up id in place.
        fn path_with_samples(path: &str) -> String {
            let mut out = String::new();
            let mut rest = path;
            while let Some(open) = rest.find('{') {
                let Some(close) = rest[open..].find('}') else {
                    break;
                };
                out.push_str(&rest[..open]);
                let name = &rest[open + 1..open + close];
                out.push_str(match name {
                    "day" => "2026-12-01",
                    _ => "0b9c0f6e-7d4a-4c1e-9f3b-2a5d8e6c1f70",
                });
                rest = &rest[open + close + 1..];
            }
            out.push_str(rest);
            out
        }

        /// A value the schema accepts (bounded in depth: schemas refer to
        /// each other).
        pub fn sample(v: &Value, doc: &Value, depth: u8) -> Value {
            named(v, doc, depth, "")
        }

        /// `name` is the field's, for a plausible string ("url" is a URL).
        fn named(v: &Value, doc: &Value, depth: u8, name: &str) -> Value {
            if depth > 12 {
                return Value::Null;
            }
            if let Some(schema) = v["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
                return named(&doc["components"]["schemas"][schema], doc, depth + 1, name);
            }
            if !v["example"].is_null() {
                return v["example"].clone();
            }
            if let Some(first) = v["examples"].as_array().and_then(|e| e.first()) {
                return first.clone();
            }
            if let Some(first) = v["enum"].as_array().and_then(|e| e.first()) {
                return first.clone();
            }
            if let Some(first) = ["oneOf", "anyOf", "allOf"]
                .iter()
                .find_map(|k| v[*k].as_array().and_then(|a| a.first()))
            {
                return named(first, doc, depth + 1, name);
            }
            let ty = match &v["type"] {
                Value::String(t) => t.as_str(),
                Value::Array(ts) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .find(|t| *t != "null")
                    .unwrap_or("null"),
                _ if v["properties"].is_object() => "object",
                _ => "null",
            };
            match ty {
                "object" => object(v, doc, depth),
                "array" => json!([sample(&v["items"], doc, depth + 1)]),
                "integer" | "number" => v["minimum"]
                    .as_i64()
                    .map(|m| json!(m.max(1)))
                    .unwrap_or(json!(1)),
                "boolean" => json!(true),
                "string" => json!(string(v, name)),
                _ => Value::Null,
            }
        }

        fn object(v: &Value, doc: &Value, depth: u8) -> Value {
            let required: Vec<&str> = v["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut out = Map::new();
            for (name, p) in v["properties"].as_object().into_iter().flatten() {
                if required.contains(&name.as_str()) {
                    out.insert(name.clone(), named(p, doc, depth + 1, name));
                }
            }
            Value::Object(out)
        }

        fn string(v: &Value, name: &str) -> &'static str {
            match name {
                "url" | "webhook_url" => return "https://hooks.example.com/tollgate",
                "reason" => return "the provider's invoice looks wrong",
                "instruction" => return "make the stitches finer",
                "prompt" => return "a paper boat on a pond",
                _ => {}
            }
            match v["format"].as_str() {
                Some("uuid") => "0b9c0f6e-7d4a-4c1e-9f3b-2a5d8e6c1f70",
                Some("date") => "2026-12-01",
                Some("date-time") => "2026-12-01T12:00:00Z",
                Some("uri") => "https://hooks.example.com/tollgate",
                Some("email") => "someone@example.com",
                _ => "text",
            }
        }
    }

    fn response(status: &str, r: &Value) -> ApiResponse {
        ApiResponse {
            status: status.to_string(),
            description: text(&r["description"]),
            schema: r["content"]
                .as_object()
                .and_then(|c| c.values().next().map(|m| kind(&m["schema"]))),
            links: r["links"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(_, x)| text(&x["operationId"]))
                .collect(),
        }
    }

    fn schemas(doc: &Value) -> Vec<ApiSchema> {
        doc["components"]["schemas"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, v)| ApiSchema {
                name: name.clone(),
                description: text(&v["description"]),
                fields: fields(v),
                kind: if v["properties"].is_object() {
                    "object".into()
                } else {
                    kind(v)
                },
            })
            .collect()
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_reference_covers_every_operation() {
            let doc = serde_json::to_value(tollgate::api::document()).unwrap();
            let r = build(&doc);
            let ops: usize = r.groups.iter().map(|g| g.operations.len()).sum();
            let expected: usize = doc["paths"]
                .as_object()
                .unwrap()
                .values()
                .map(|i| i.as_object().unwrap().len())
                .sum();
            assert_eq!(ops, expected);
            let submit = r
                .groups
                .iter()
                .flat_map(|g| &g.operations)
                .find(|o| o.id == "submit_job")
                .unwrap();
            assert!(submit.signed_in);
            assert_eq!(submit.body[0].1, "JobRequestBody");
            assert!(r
                .schemas
                .iter()
                .any(|s| s.name == "Usd" && s.kind.contains("matching")));
        }
    }
}
